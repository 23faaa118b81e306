"""Every transition of a worker's main loop (shared.worker.lifecycle), each
the decision behind a behaviour the end-to-end suite proves with a real
broker, Postgres and Spark (named in each test's docstring)."""

from shared.worker.lifecycle import (
    SEARCH_AFTER_FAILURES,
    BackOff,
    Ended,
    History,
    NewSession,
    Resume,
    RunEnded,
    Scan,
    ScanEnded,
    Search,
    SearchEnded,
    Stop,
    next_step,
)

POISON = RunEnded(Ended.FAILED, error="NumberFormatException: x", cause="java.lang.NumberFormatException")
OUTAGE = RunEnded(Ended.FAILED, error="TimeoutException: broker")  # names no record
UNREADABLE = RunEnded(Ended.FAILED, error="overflows when converting to Spark", unreadable=True)


def steps(events):
    """The steps a run of events leads to, from no failures."""
    taken, history = [], History()
    for event in events:
        step, history = next_step(event, history)
        taken.append(step)
    return taken, history


def test_a_stop_ends_the_loop_whatever_ended_the_run_or_interrupted():
    """e2e: every SIGTERM test (exit 0 within 30 s), a stop during a scan
    (test_a_timestamp_spark_cannot_convert_skips_that_line_alone_even_across_a_stop)."""
    assert next_step(RunEnded(Ended.STOPPED), History(2)) == (Stop(), History(2))
    assert next_step(ScanEnded(UNREADABLE, skipped=False, stopped=True), History())[0] == Stop()
    assert next_step(SearchEnded(POISON, skipped=False, stopped=True), History(3))[0] == Stop()


def test_a_rebalance_a_new_batch_size_or_a_cold_first_batch_resumes_at_once_and_keeps_the_failure_count():
    """e2e: copies joining and leaving during batches hand partitions over
    without a gap; a batch over the byte budget restarts its run smaller."""
    for ended in (Ended.REVOKED, Ended.RESIZED, Ended.FIRST_BATCH):
        assert next_step(RunEnded(ended), History(2)) == (Resume(), History(2))


def test_failures_back_off_doubling_up_to_30_s_and_a_stored_batch_counts_again_from_one():
    """e2e: outages of the broker and Postgres delay, never kill (pipeline outage tests)."""
    taken, history = steps([OUTAGE] * 7)
    assert [step.seconds for step in taken if isinstance(step, BackOff)] == [2, 4, 8, 16, 30, 30, 30]
    assert history == History(7)
    after_a_batch = RunEnded(Ended.FAILED, stored_a_batch=True, error="TimeoutException: broker")
    assert next_step(after_a_batch, history) == (BackOff(2, "TimeoutException: broker"), History(1))
    assert taken[0] == BackOff(2, OUTAGE.error)


def test_a_failure_after_a_stored_batch_never_searches_however_many_came_before():
    """A record that fails its batch fails it before anything of it is stored:
    a run that stored a batch first was not stuck on one."""
    history = History(SEARCH_AFTER_FAILURES + 5)
    stored = RunEnded(Ended.FAILED, stored_a_batch=True, error=POISON.error, cause=POISON.cause)
    assert next_step(stored, history) == (BackOff(2, POISON.error), History(1))


def test_the_third_failure_in_a_row_on_a_records_error_searches_for_that_record():
    """e2e: test_a_record_that_fails_its_batch_each_time_is_found_and_skipped_alone."""
    taken, history = steps([POISON] * 3)
    assert taken == [BackOff(2, POISON.error), BackOff(4, POISON.error), Search("java.lang.NumberFormatException")]
    # Failures that name no record never search, however many.
    taken, _ = steps([OUTAGE] * 10)
    assert not any(isinstance(step, Search) for step in taken)


def test_two_poison_records_side_by_side_the_second_is_searched_for_at_its_first_failure():
    """e2e: the same test puts two side by side; before, the second stalled its partition."""
    step, history = next_step(POISON, History(SEARCH_AFTER_FAILURES - 1))
    assert step == Search(POISON.cause)
    step, history = next_step(SearchEnded(POISON, skipped=True), history)
    assert step == Resume()
    assert next_step(POISON, history)[0] == Search(POISON.cause)


def test_a_search_that_found_nothing_backs_off_as_the_failure_before_it():
    """A resize or an outage during a search ends it short: the loop backs
    off and the next failures search again."""
    _, history = steps([POISON] * 3)
    step, history = next_step(SearchEnded(POISON, skipped=False), history)
    assert step == BackOff(8, POISON.error)
    assert next_step(POISON, history)[0] == Search(POISON.cause)


def test_an_unreadable_timestamp_scans_at_once_and_a_scan_that_skipped_resumes():
    """e2e: test_a_timestamp_spark_cannot_convert_skips_that_line_alone_even_across_a_stop."""
    assert next_step(UNREADABLE, History()) == (Scan(), History())
    assert next_step(ScanEnded(UNREADABLE, skipped=True), History()) == (Resume(), History())


def test_a_scan_that_found_nothing_counts_as_the_failure_it_followed():
    """The broker went away during the scan: the run's failure backs off as any other."""
    assert next_step(ScanEnded(UNREADABLE, skipped=False), History()) == (BackOff(2, UNREADABLE.error), History(1))


def test_a_lost_spark_starts_a_new_session_backing_off_as_failures_do_and_never_searches():
    """e2e: test_a_driver_outlives_its_clusters_outage_and_counts_every_word_once."""
    lost = RunEnded(Ended.SPARK_LOST, error="no executor for 30 s")
    taken, history = steps([POISON, POISON, lost, lost])
    assert taken[2:] == [NewSession(8, lost.error), NewSession(16, lost.error)]  # not a Search: no record's fault
    assert history == History(4)
    after_a_batch = RunEnded(Ended.SPARK_LOST, stored_a_batch=True, error=lost.error)
    assert next_step(after_a_batch, history) == (NewSession(2, lost.error), History(1))
