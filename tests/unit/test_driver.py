"""When a driver counts its Spark cluster's executors as gone for good
(shared.worker.driver.Executors): the decision behind
test_a_driver_outlives_its_clusters_outage_and_counts_every_word_once."""

from shared.worker.driver import EXECUTORLESS_SECONDS, Executors


def test_executors_are_gone_after_none_were_seen_for_the_whole_wait():
    executors = Executors()
    assert not executors.gone(1, ever=1, now=0.0)
    assert not executors.gone(0, ever=1, now=100.0)  # the wait begins when none is first seen
    assert not executors.gone(0, ever=1, now=100.0 + EXECUTORLESS_SECONDS - 1)
    assert executors.gone(0, ever=1, now=100.0 + EXECUTORLESS_SECONDS)


def test_a_replaced_executor_starts_the_wait_over():
    executors = Executors()
    executors.gone(1, ever=1, now=0.0)
    executors.gone(0, ever=1, now=1.0)
    assert not executors.gone(1, ever=2, now=EXECUTORLESS_SECONDS)
    assert not executors.gone(0, ever=2, now=EXECUTORLESS_SECONDS + 1)
    assert not executors.gone(0, ever=2, now=2 * EXECUTORLESS_SECONDS)


def test_executors_that_came_and_went_between_two_looks_count_as_had():
    """The cluster died while the new session was still starting, before
    the driver first looked: it must not wait for executors for ever."""
    executors = Executors()
    assert not executors.gone(0, ever=1, now=0.0)
    assert executors.gone(0, ever=1, now=EXECUTORLESS_SECONDS)


def test_a_new_application_waits_for_its_first_executors_as_long_as_the_cluster_makes_it():
    """Starting anew would put it at the back of a busy master's queue."""
    executors = Executors()
    assert not executors.gone(0, ever=0, now=0.0)
    assert not executors.gone(0, ever=0, now=10 * EXECUTORLESS_SECONDS)
