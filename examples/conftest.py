# The tests' stack and Spark (tests/conftest.py), for the examples' tests.
from tests.conftest import database_url, prefix, spark, stack, stacks  # noqa: F401
