"""The latency case's slow hour (benchmarks.cpu_limit) on this machine's
real cgroups: what the case starts runs in a group of its own whose quota
the kernel enforces, and the case leaves no group behind. The limit is
taken in a child Python, so that pytest's own process never moves."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cpu_limit import cpus_limited

# Inside the limit, a process started there: a busy loop, until the kernel held the group back.
LIMITED = """
import subprocess, sys, time
from benchmarks.cpu_limit import cpus_limited

def throttled(group):
    return int(dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())["nr_throttled"])

with cpus_limited(0.2) as group:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        started_in = open(f"/proc/{busy.pid}/cgroup").read()
        deadline = time.monotonic() + 60
        while throttled(group) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        print(group, f"/{group.name}\\n" in started_in, throttled(group))
    finally:
        busy.kill()
        busy.wait()
"""


def test_what_a_limited_case_starts_shares_a_quota_the_kernel_enforces():
    child = subprocess.run([sys.executable, "-c", LIMITED], capture_output=True, text=True, timeout=120,
                           cwd=Path(__file__).parents[2])
    if "a CPU limit needs" in child.stderr:
        pytest.skip(child.stderr.strip().splitlines()[-1])
    assert child.returncode == 0, child.stderr
    group, started_in_it, throttled = child.stdout.split()
    assert started_in_it == "True"
    assert int(throttled) > 0
    assert not Path(group).exists()  # removed once the case ended


def test_a_limit_that_is_no_number_of_cores_stops_the_case():
    with pytest.raises(SystemExit, match="positive number of cores"), cpus_limited(0):
        pass


def test_a_quota_the_kernel_refuses_stops_the_case_and_leaves_no_group():
    # Below the kernel's least quota (1 ms a period): refused once the group exists.
    with pytest.raises(SystemExit) as stopped, cpus_limited(0.001):
        pass
    assert not any(Path(root, f"bench-{os.getpid()}").exists() for root in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup"))
    if "may write" in str(stopped.value):
        pytest.skip(str(stopped.value))
    assert "could not be set" in str(stopped.value)
