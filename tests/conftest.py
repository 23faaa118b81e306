"""Fixtures on the real local stack: one broker and one Postgres per test
session; each test gets its own topic prefix, so tests never share data."""

import os
import uuid

import pytest

from shared.local_stack import LocalStack
from tests.processes import WorkerProcesses


@pytest.fixture(scope="session")
def stack():
    with LocalStack(database_url=os.environ.get("DATABASE_URL")) as local_stack:
        yield local_stack


@pytest.fixture
def prefix(stack):
    """A fresh KAFKA_PREFIX with the contract's topics created under it."""
    name = f"t{uuid.uuid4().hex[:8]}."
    stack.broker.create_topics(name, partitions=2)
    return name


@pytest.fixture
def workers(stack, prefix, tmp_path):
    """Starts worker processes in the stack's environment; kills leftovers."""
    processes = WorkerProcesses(stack.environment(prefix), tmp_path)
    yield processes
    processes.kill_all()
