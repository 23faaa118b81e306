"""What the integration tests on the in-process harness share."""

import pytest

from devstack.worker_testing import Harness


@pytest.fixture
def harnesses(spark, stack, prefix, database_url):
    """Harness(worker, environment) on the test's stack; each closed after it."""
    made = []

    def harness(worker, **environment):
        made.append(Harness(worker, spark, stack, prefix, database_url, environment))
        return made[-1]

    yield harness
    for each in made:
        each.close()
