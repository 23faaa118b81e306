"""A worker's JVM, as shared.spark starts it, keeps its memory within a
dyno all day: its heap starts small, its compiled code is bounded, and
Spark forgets past jobs (docs/operations.md, "Sizing and scaling")."""

from devstack.local_stack import wait_until
from shared.jvm_options import INITIAL_OLD_GENERATION_MB, YOUNG_GENERATION_MB
from shared.spark import RETAINED_HISTORY

MB = 2**20


def test_the_heap_starts_small_and_the_compiled_code_is_bounded(spark):
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    heap = management.getMemoryMXBean().getHeapMemoryUsage()
    assert heap.getInit() == (YOUNG_GENERATION_MB + INITIAL_OLD_GENERATION_MB) * MB
    pools = {pool.getName(): pool.getUsage().getMax() for pool in management.getMemoryPoolMXBeans()}
    assert pools["Eden Space"] + 2 * pools["Survivor Space"] == YOUNG_GENERATION_MB * MB
    assert heap.getMax() >= 450 * MB  # Spark's minimum, and SPARK_DRIVER_MEMORY's to grow into
    code = sum(pool.getUsage().getMax() for pool in management.getMemoryPoolMXBeans()
               if pool.getName().startswith("Code"))  # one CodeCache, or segmented CodeHeaps
    assert code == 64 * MB


def test_spark_forgets_all_but_its_latest_jobs(spark):
    for _ in range(int(RETAINED_HISTORY) + 20):  # each a job, as each micro-batch is one or more
        spark.range(10).count()
    # The store drops old jobs on a thread of its own, soon after each new one.
    wait_until(lambda: len(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) <= int(RETAINED_HISTORY),
               30, f"at most {RETAINED_HISTORY} jobs remembered")
