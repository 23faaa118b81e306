"""The worker on the harness: a real local Spark, broker and Postgres."""

import pytest

from devstack.postgres import query
from devstack.worker_testing import Harness, Step
from examples.status_codes.worker import STATUS_CODES
from tests.clock import T0

LINES = ["GET /a 200", "GET /b 404", "POST /c 500", "not a request", "GET /d 200"] * 20
AT_MS = [T0 * 1000 + 250 * n for n in range(len(LINES))]  # 4 a second: three windows


@pytest.mark.parametrize("crash", [None, *Step.of(STATUS_CODES)])
def test_each_status_is_counted_once_per_window_whatever_step_a_batch_crashes_at(
        spark, stack, prefix, database_url, crash):
    harness = Harness(STATUS_CODES, spark, stack, prefix, database_url, {"MAX_OFFSETS_PER_TRIGGER": "30"})
    try:
        harness.send(LINES, timestamps_ms=AT_MS, partition=0)
        if crash:
            assert harness.run(crash=crash).crashed
        assert harness.run().stored_everything
    finally:
        harness.close()
    expected: dict[tuple[int, int], int] = {}
    for line, ms in zip(LINES, AT_MS, strict=True):
        if line[-1].isdigit():
            key = (ms // 10_000 * 10, int(line[-3:]))
            expected[key] = expected.get(key, 0) + 1
    rows = query(database_url, "SELECT extract(epoch FROM window_start)::bigint, status, count FROM status_counts")
    assert {(start, status): count for start, status, count in rows} == expected
