"""The jit lever: each worker's own JIT (shared.worker.Worker.jvm.jit),
not HotSpot's default (docs/decisions/jit.md). Off, a driver's JVM runs
HotSpot's tiered compilation as it comes."""

from enum import Enum
from pathlib import Path

# C2 compiles a method once it ran ten times as often as HotSpot's default
# asks: a cold start's first seconds otherwise compiled with C2 many methods
# that the first batches ran a few times (the start's own code), on the same
# cores as those batches; the records' code, run for every record, still
# reaches C2 soon.
C2_LATER = ("-XX:Tier4InvocationThreshold=50000", "-XX:Tier4MinInvocationThreshold=6000",
            "-XX:Tier4CompileThreshold=150000", "-XX:Tier4BackEdgeThreshold=400000")


class Jit(Enum):
    """How a driver's JVM compiles its hot code: HotSpot's C1 compiles at
    once, its C2 later and better (docs/decisions/jit.md)."""

    # C1, then C2 for the hottest code: the fastest code once warm.
    TIERED = C2_LATER
    # Tiered, but C2 leaves the code Spark runs per batch rather than per
    # record (its planning, scheduling and task serialization:
    # jit-directives.json) to C1: C2 compiling that code competed with the
    # batches for the same cores.
    TIERED_RECORDS = (*C2_LATER, "-XX:+UnlockDiagnosticVMOptions",
                      f"-XX:CompilerDirectivesFile={Path(__file__).with_name('jit-directives.json')}")
    # C1 alone, every method compiled at once and without profiling.
    C1_ONLY = ("-XX:TieredStopAtLevel=1",)
