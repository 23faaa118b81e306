"""The options of a worker's driver JVM: its memory (sized for a dyno) and
how it compiles (shared.worker.Worker.jvm chooses per worker)."""

from dataclasses import dataclass
from pathlib import Path

from shared.config import MIN_SPARK_MEMORY_MB
from shared.levers import LEVERS
from shared.levers.jit import Jit

# Where a dyno (or a container) finds its memory limit: cgroup v1, then v2.
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max")
NO_LIMIT_BYTES = 2**40  # cgroup v1 reports "unlimited" as about 2**63
# A driver's JVM beside its maximum heap (SPARK_DRIVER_MEMORY), sized so that
# a worker stays flat within a standard-2x dyno all day (docs/operations.md,
# "Sizing and scaling"). The heap starts small (its young generation and
# 64 MB of old) and grows as it needs: the JVM's own default start is a 64th
# of the memory it sees (on a dyno maybe its host's), and every page of a
# young generation is touched as it cycles. The JIT's compiled code stops at
# 64 MB instead of growing for hours toward 240.
# Every 5 s the JVM hands back to the system what glibc's malloc holds freed
# (JDK 17.0.9 and later): tens of MB of a worker's resident memory that no
# JVM category accounts for. After a full collection the heap gives back what
# is more than half free (70 % by default): without that, each growth of the
# old generation stayed, and a worker's resident memory rose in steps.
JVM_MEMORY_OPTIONS = ("-XX:ReservedCodeCacheSize=64m", "-XX:TrimNativeHeapInterval=5000", "-XX:MaxHeapFreeRatio=50")
INITIAL_OLD_GENERATION_MB = 64
YOUNG_GENERATION_MB = 64


@dataclass(frozen=True)
class DriverJvm:
    """What a worker asks of its driver's JVM (shared.worker.Worker.jvm)."""

    # Its young generation: each page of it is resident once allocation has
    # cycled through it, and a worker that allocates fast spends less time
    # in collections (each stops every task) with more.
    young_generation_mb: int = YOUNG_GENERATION_MB
    # On 2 cores C2 compiles beside a cold start's first batches for their
    # whole length: each worker's choice is measured (docs/decisions/jit.md).
    jit: Jit = Jit.TIERED

    def options(self) -> list[str]:
        return [f"-Xms{self.young_generation_mb + INITIAL_OLD_GENERATION_MB}m", f"-Xmn{self.young_generation_mb}m",
                *(self.jit.value if LEVERS.jit else ())]


def driver_memory(configured: str = "", limit_files: tuple[str, ...] = CGROUP_MEMORY_LIMITS) -> str:
    """SPARK_DRIVER_MEMORY, or half the dyno's memory, and at least Spark's
    minimum (512m): the rest holds the JVM's own memory (classes, compiled
    code, threads) and Python's (docs/operations.md, "Sizing and scaling")."""
    if configured:
        return configured
    for path in limit_files:
        try:
            limit = int(Path(path).read_text().strip())
        except (OSError, ValueError):  # absent, or "max" (cgroup v2's unlimited)
            continue
        if limit < NO_LIMIT_BYTES:
            return f"{max(MIN_SPARK_MEMORY_MB, limit // 2 // 2**20)}m"
    return f"{MIN_SPARK_MEMORY_MB}m"
