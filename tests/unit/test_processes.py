"""The benchmarks' count of a worker's CPU (devstack.processes): a process
that ended between being listed and being read is left out, never an error."""

import sys

import psutil
import pytest

from devstack.processes import _cpu_seconds, _named


def test_a_process_that_ended_since_it_was_listed_is_left_out():
    ended = psutil.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    alive = psutil.Process()
    assert not _named(ended, ("python",))
    assert _named(alive, ("python",))
    assert _cpu_seconds([ended, alive]) == pytest.approx(sum(alive.cpu_times()[:2]), abs=0.1)
