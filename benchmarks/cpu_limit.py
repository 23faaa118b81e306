"""A slow hour on demand: this process, and every process it starts from
then on, held to a number of cores by a CPU quota (a cgroup of its own:
cgroup v1's cpu.cfs_quota_us, or v2's cpu.max), as a host whose cores are
slower, or busy with other tenants, holds a dyno. The broker, Postgres, the
workers and their load all share the quota, as they share the 2 cores.

The machine's quick and slow hours come and go; 1.4 of its 2 cores stands
for a slow one (docs/decisions/slow-hour.md). Needs a cgroup filesystem
this user may write (root can, on this machine)."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PERIOD_US = 100_000  # the kernel's default period


@contextmanager
def cpus_limited(cores: float | None) -> Iterator[Path | None]:
    """Hold this process and its future children to `cores` (None: no
    limit); gives the cgroup that holds them."""
    if cores is None:
        yield None
        return
    group, was_in = _new_group(cores)
    try:
        (group / "cgroup.procs").write_text(str(os.getpid()))
        yield group
    finally:
        (was_in / "cgroup.procs").write_text(str(os.getpid()))
        try:
            group.rmdir()
        except OSError:  # a child still running in it: the kernel keeps the group until it is empty
            pass


def _new_group(cores: float) -> tuple[Path, Path]:
    """A new cgroup at the top of the cpu hierarchy, its quota `cores` a
    period; and the group this process is in."""
    if not cores > 0:
        raise SystemExit(f"a CPU limit is a positive number of cores, not {cores}")
    quota_us, name = round(cores * PERIOD_US), f"bench-{os.getpid()}"
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    if (v1 / "cpu.cfs_quota_us").exists():
        root, setting, value = v1, "cpu.cfs_quota_us", str(quota_us)
    elif "cpu" in _read(v2 / "cgroup.subtree_control").split():
        root, setting, value = v2, "cpu.max", f"{quota_us} {PERIOD_US}"
    else:
        raise SystemExit("a CPU limit needs the cgroup cpu controller (v1's cpu, or v2's cpu.max)")
    group = root / name
    try:
        group.mkdir()
    except OSError as error:
        raise SystemExit(f"a CPU limit needs a cgroup this user may write: {error.strerror} ({group})") from None
    try:
        (group / setting).write_text(value)
    except OSError as error:
        group.rmdir()  # empty: nothing was moved into it yet
        raise SystemExit(f"a CPU limit could not be set: {error.strerror} ({group / setting})") from None
    return group, root / _own_path(v1_controller=root == v1)


def _own_path(v1_controller: bool) -> str:
    """This process's cgroup, relative to its hierarchy's top (/proc/self/cgroup:
    `id:controllers:/path`, v2's controllers empty)."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        if ("cpu" in controllers.split(",")) if v1_controller else controllers == "":
            return path.lstrip("/")
    return ""


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
