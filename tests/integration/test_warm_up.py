"""The warm-up (shared.levers.warm_up.WarmingUp) on a real in-process Spark:
cut as the first query starts, its job ends at once, whether it was running
or not yet submitted, and no other thread's job is touched; what no cancel
stops goes on at the lowest CPU priority."""

import os
import threading

from devstack.local_stack import wait_until
from shared.levers.warm_up import WarmingUp, pinned_jvm_thread

# Hours of work for 2 cores: a warm-up that is not cut does not end by itself
# within a test (a max, not a sum: a sum overflows within seconds and fails).
ENDLESS = 10**13


def endless_job(spark):
    spark.range(ENDLESS).selectExpr("max(id)").collect()


def end_within_30_s(warming, capsys) -> str:
    """End `warming`; its one `event=warmed_up` line."""
    ended = threading.Thread(target=warming.end)
    ended.start()
    ended.join(30)
    assert not ended.is_alive(), "the warm-up still ran 30 s after its end was asked for"
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("event=warmed_up ")]
    return line


def test_a_cut_cancels_the_running_job_and_says_so(spark, capsys):
    warming = WarmingUp(spark, lambda: endless_job(spark))
    tracker = spark.sparkContext.statusTracker()
    # The warm-up's own job (an earlier test's may still show as active: the
    # status store is updated behind the jobs).
    wait_until(lambda: set(tracker.getJobIdsForGroup(warming.job_group)) & set(tracker.getActiveJobsIds()), 60,
               "the warm-up's job running")
    assert "cut=true" in end_within_30_s(warming, capsys)
    # Only the warm-up's jobs: this thread's next job runs.
    assert spark.range(5).count() == 5


def test_a_cut_before_the_job_is_submitted_cancels_it_as_it_comes(spark, capsys):
    planned = threading.Event()
    warming = WarmingUp(spark, lambda: (planned.wait(), endless_job(spark)))
    warming.cut()
    planned.set()
    assert "cut=true" in end_within_30_s(warming, capsys)


def test_a_warm_up_done_before_the_cut_is_not_called_cut(spark, capsys):
    done = threading.Event()
    warming = WarmingUp(spark, lambda: (spark.range(10).collect(), done.set()))
    wait_until(done.is_set, 60, "the warm-up's job done")
    assert "cut=false" in end_within_30_s(warming, capsys)


def test_a_cut_leaves_what_it_does_in_the_jvm_meanwhile_the_lowest_cpu_priority(spark, capsys):
    # Planning in progress, which no cancel stops: here a JVM call that
    # returns when the test lets it (`await` is a keyword in Python).
    in_the_jvm = threading.Event()
    released = spark.sparkContext._jvm.java.util.concurrent.CountDownLatch(1)
    warming = WarmingUp(spark, lambda: (in_the_jvm.set(), getattr(released, "await")()))
    wait_until(in_the_jvm.is_set, 60, "the warm-up calling the JVM")
    thread = warming.jvm_thread
    assert thread is not None
    assert os.getpriority(os.PRIO_PROCESS, thread) == 0  # Linux's nice, for this one thread of the JVM
    main_thread = pinned_jvm_thread(spark, "test-main")
    warming.cut()
    assert os.getpriority(os.PRIO_PROCESS, thread) == 19
    assert main_thread is not None and os.getpriority(os.PRIO_PROCESS, main_thread) == 0
    released.countDown()
    end_within_30_s(warming, capsys)
    assert warming.jvm_thread is None  # ended with the warm-up: its id may be another thread's now
