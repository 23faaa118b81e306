"""The shared worker lifecycle, run for real: a Spark query on the real broker
(tests/echo_worker.py), its per-batch log lines, its progress in the consumer
group, and a clean stop on SIGTERM sent to the whole process group."""

import signal
import threading
import time
from collections import Counter
from unittest import mock

import pytest
from kafka import TopicPartition
from py4j.protocol import Py4JJavaError

from devstack.kafka_io import committed_offsets, end_offsets, produce, read_all
from devstack.local_stack import wait_until
from shared import commit_note
from shared.config import load
from shared.dead_letters import DeadLetter
from shared.worker.errors import failing_record_cause
from shared.worker.group_member import GroupMember
from tests.checks import assert_no_secret_in, assert_no_stack_trace, broker_away, heroku_like

SIGTERM_GRACE = 30  # the contract: a copy stops cleanly within 30 s of SIGTERM


def lines(start, stop):
    return [f"line {n} é" for n in range(start, stop)]


def progress_saved(stack, prefix):
    """True once the echo group's committed offsets reach the end of textlines."""
    topic = prefix + "textlines"
    return committed_offsets(stack, prefix + "echo-app", topic) == end_offsets(stack, topic)


@heroku_like
def test_a_query_runs_logs_commits_and_stops_on_sigterm_then_resumes(stack, prefix, workers):
    produce(stack, prefix + "textlines", lines(0, 300))
    first = workers.start("tests.echo_worker")

    words = read_all(stack, prefix + "words", 300)
    assert Counter(r.value.decode() for r in words) == Counter(line.upper() for line in lines(0, 300))
    wait_until(lambda: progress_saved(stack, prefix), 60, "offsets committed to the group")

    batches = first.log_lines("batch")
    assert batches and all({"app", "batch", "rows_in", "rows_out", "duration_ms", "lag"} <= b.keys()
                           for b in batches)
    assert sum(int(b["rows_in"]) for b in batches) == 300
    assert batches[-1]["lag"] == "0"

    produce(stack, prefix + "textlines", lines(300, 500))
    read_all(stack, prefix + "words", 500)
    first.signal(signal.SIGTERM)
    assert first.wait(SIGTERM_GRACE) == 0
    assert "event=stopped" in first.output()
    assert progress_saved(stack, prefix)

    # A new process, on a new empty checkpoint, resumes where the group is.
    produce(stack, prefix + "textlines", lines(500, 600))
    second = workers.start("tests.echo_worker")
    wait_until(lambda: progress_saved(stack, prefix), 240, "the new lines processed")
    words = read_all(stack, prefix + "words", 600)
    assert Counter(r.value.decode() for r in words) == Counter(line.upper() for line in lines(0, 600))
    second.signal(signal.SIGTERM)
    assert second.wait(SIGTERM_GRACE) == 0
    assert_no_secret_in(first.output() + second.output(), stack.environment(prefix))


def rows_in(worker):
    return sum(int(batch["rows_in"]) for batch in worker.log_lines("batch"))


def assigned(worker):
    """The partitions the group last gave this copy, or None."""
    assignments = worker.log_lines("partitions_assigned")
    return assignments[-1]["partitions"] if assignments else None


def produce_to_both_partitions(stack, prefix, start, stop):
    for partition in (0, 1):
        produce(stack, prefix + "textlines", lines(start, stop)[partition::2], partition=partition)


def test_copies_split_the_partitions_and_hand_them_over_without_repeating_a_record(
        stack, prefix, workers):
    produce_to_both_partitions(stack, prefix, 0, 400)
    first = workers.start("tests.echo_worker")
    wait_until(lambda: progress_saved(stack, prefix), 240, "the first lines processed")

    # A second copy joins: each gets one partition, and nothing is read twice.
    second = workers.start("tests.echo_worker")
    wait_until(lambda: {assigned(first), assigned(second)} == {"0", "1"}, 240,
               "the partitions split between the copies")
    produce_to_both_partitions(stack, prefix, 400, 800)
    # The batch's line follows its commit: wait for the lines, then check the offsets.
    wait_until(lambda: rows_in(first) + rows_in(second) == 800, 240, "the next lines processed")
    assert rows_in(second) > 0
    wait_until(lambda: progress_saved(stack, prefix), 30, "the offsets committed")

    # The first stops: the second takes both partitions, from where the first ended.
    first.signal(signal.SIGTERM)
    assert first.wait(SIGTERM_GRACE) == 0
    wait_until(lambda: assigned(second) == "0,1", 240, "the second copy owning both partitions")
    produce_to_both_partitions(stack, prefix, 800, 1000)
    wait_until(lambda: rows_in(first) + rows_in(second) == 1000, 240, "the last lines processed")
    wait_until(lambda: progress_saved(stack, prefix), 30, "the offsets committed")
    words = read_all(stack, prefix + "words", 1000)
    assert Counter(r.value.decode() for r in words) == Counter(line.upper() for line in lines(0, 1000))
    second.signal(signal.SIGTERM)
    assert second.wait(SIGTERM_GRACE) == 0


def test_records_retention_removed_before_they_were_read_are_logged_as_lost(stack, prefix, workers):
    produce_to_both_partitions(stack, prefix, 0, 400)
    first = workers.start("tests.echo_worker")
    wait_until(lambda: progress_saved(stack, prefix), 240, "the first lines processed")
    first.signal(signal.SIGTERM)
    assert first.wait(SIGTERM_GRACE) == 0

    # While no copy runs, retention removes 50 unread records of partition 0.
    produce_to_both_partitions(stack, prefix, 400, 800)
    with stack.broker.admin() as admin:
        admin.delete_records({TopicPartition(prefix + "textlines", 0): 250})
    second = workers.start("tests.echo_worker")
    wait_until(lambda: rows_in(second) == 350, 240, "the remaining lines processed")
    wait_until(lambda: progress_saved(stack, prefix), 30, "the offsets committed")
    assert [(lost["partition"], lost["records"]) for lost in second.log_lines("data_lost")] == [("0", "50")]
    second.signal(signal.SIGTERM)
    assert second.wait(SIGTERM_GRACE) == 0


def test_a_record_that_fails_its_batch_each_time_is_found_and_skipped_alone(stack, prefix, workers):
    good = lines(0, 600)
    produce(stack, prefix + "textlines", good[:150] + ["poison"] * 2 + good[150:300], partition=0)
    produce(stack, prefix + "textlines", good[300:], partition=1)
    worker = workers.start("tests.echo_worker", MAX_OFFSETS_PER_TRIGGER="200")
    wait_until(lambda: progress_saved(stack, prefix), 240, "every line but one processed")

    searches, skipped = worker.log_lines("failing_record_search"), worker.log_lines("skipped_record")
    assert len(worker.log_lines("query_failed")) >= 2  # the search begins on the third failure
    assert len(searches) == 2 and searches[0]["error"] == skipped[0]["error"] != ""
    assert [(s["partition"], s["offset"], s["reason"]) for s in skipped] == [("0", "150", "failing"),
                                                                             ("0", "151", "failing")]
    letters = [DeadLetter.of_kafka(record) for record in read_all(stack, prefix + "dead-letters", 2)]
    assert sorted((letter.offset, letter.reason, letter.value) for letter in letters) == [
        (150, "failing", b"poison"), (151, "failing", b"poison")]
    # A failed batch's words may have been sent before it failed: each line at least once.
    words = Counter(r.value.decode() for r in read_all(stack, prefix + "words", 600))
    assert set(words) == {line.upper() for line in good}
    assert "Traceback" not in worker.output()
    worker.signal(signal.SIGTERM)
    assert worker.wait(SIGTERM_GRACE) == 0


def test_a_task_error_names_a_record_to_search_for_but_a_missing_class_does_not(spark):
    """A class missing from the slug fails every batch that meets it: a bug of
    the build, for which skipping records one by one would lose them all."""
    def cause(method, argument):
        with pytest.raises(Py4JJavaError) as failure:
            spark.sql(f"SELECT reflect({method}, concat({argument}, id)) FROM range(1)").collect()
        return failing_record_cause(failure.value)

    assert cause("'java.lang.Integer', 'parseInt'", "'x'") == "java.lang.NumberFormatException"
    assert cause("'java.lang.Class', 'forName'", "'com.example.Missing'") is None


def test_a_bad_variable_stops_the_worker_at_start_with_one_line(workers):
    worker = workers.start("tests.echo_worker", KAFKA_URL="kafka+ssl://secret-broker.example:9096")
    assert worker.wait(60) != 0
    output = worker.output()
    assert output.strip() == "config error: KAFKA_TRUSTED_CERT is required for kafka+ssl:// brokers"
    assert "secret-broker" not in output


def jvm_launched(worker):
    return any(program.name() == "java" for program in worker.programs())


def test_a_sigterm_before_spark_is_up_stops_the_worker_in_order_and_it_reads_nothing(stack, prefix, workers):
    """A dyno stopped in its first seconds (scaled down, or deployed again, as
    it starts): the signal lands once Spark's JVM is launched, well before
    its session is up. It was ignored until then, so the copy joined, read
    and ran on until Heroku's SIGKILL."""
    produce(stack, prefix + "textlines", lines(0, 100))
    worker = workers.start("services.text_processor")
    wait_until(lambda: jvm_launched(worker), 60, "Spark's JVM launched")
    worker.signal(signal.SIGTERM)
    assert worker.wait(SIGTERM_GRACE) == 0
    output = worker.output()
    before_the_stop, after_it = output.split("event=stop_requested", 1)
    assert "event=start " not in before_the_stop  # logged once Spark is up and the group answered
    assert "event=stopped" in after_it and "event=batch" not in output
    assert_no_stack_trace(output)


def test_a_sigterm_at_start_in_a_broker_outage_stops_the_worker_well_within_30_s(workers):
    """Its group member's first connection cannot be made: kafka-python tries
    for 30 s before it gives up, and the stop waited for that."""
    worker = workers.start("services.text_processor", KAFKA_URL=f"kafka://{broker_away()}")
    wait_until(lambda: jvm_launched(worker), 60, "Spark's JVM launched")
    worker.signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert worker.wait(SIGTERM_GRACE) == 0
    assert time.monotonic() - signalled < SIGTERM_GRACE / 2
    output = worker.output()
    assert "event=stopped" in output.split("event=stop_requested", 1)[1]
    assert "event=warmed_up" not in output  # a stop asked for before Spark was up starts no warm-up
    assert_no_stack_trace(output)


def test_offsets_reported_on_the_listeners_thread_are_committed_by_the_polling_thread(stack, prefix):
    give_up = threading.Event()
    member = GroupMember(load(stack.environment(prefix)).kafka, "handover", "textlines", give_up)
    try:
        assert partitions_within(member, give_up, 60) == (0, 1)
        member.begin_run("run-1")
        listener = threading.Thread(target=member.report, args=("run-1", {0: 5, 1: 7}, 1250))
        listener.start()
        listener.join()
        group, topic = prefix + "handover-app", prefix + "textlines"
        assert committed_offsets(stack, group, topic) == {}  # the listener's thread left the consumer alone
        member.poll()
        wait_until(lambda: committed_offsets(stack, group, topic) == {0: 5, 1: 7}, 30, "the commit")
        with stack.broker.admin() as admin:
            marks = admin.list_group_offsets({group: None})[group].values()
        assert {commit_note.read(mark.metadata)[1] for mark in marks} == {1250}  # the batch's duration, for the page
    finally:
        member.close()


def test_a_report_of_a_forgotten_query_does_not_commit_over_what_followed(stack, prefix):
    """Spark's listener runs behind the query: the one-batch run before a
    skipped record may report after the skip was committed."""
    give_up = threading.Event()
    member = GroupMember(load(stack.environment(prefix)).kafka, "late", "textlines", give_up)
    try:
        assert partitions_within(member, give_up, 60) == (0, 1)
        member.begin_run("run-1")
        member.end_run("run-1", None)
        member.commit({0: 51})
        member.report("run-1", {0: 50}, 1250)
        member.poll()
        # One connection to the coordinator: a commit sent by that poll is
        # answered before this read is.
        assert member.committed() == {0: 51}
    finally:
        member.close()


def test_a_copy_holding_partitions_starts_a_run_and_commits_its_batch_at_once(stack, prefix):
    """No poll (which waits out its timeout on paused partitions) before a
    run on partitions the copy holds; a cold first run's batch is committed
    before its query stops, with no poll either, unless the run was ended
    meanwhile."""
    give_up = threading.Event()
    member = GroupMember(load(stack.environment(prefix)).kafka, "at-once", "textlines", give_up)
    try:
        assert partitions_within(member, give_up, 60) == (0, 1)
        with mock.patch.object(member, "poll", wraps=member.poll) as polls:
            assert member.wait_for_partitions() == (0, 1)
        assert polls.call_count == 0
        group, topic = prefix + "at-once-app", prefix + "textlines"
        member.begin_run("run-1")
        member.commit_now("run-1", {0: 5})
        wait_until(lambda: committed_offsets(stack, group, topic) == {0: 5}, 30, "the commit, with no poll")
        member.end_run("run-1", None)
        member.commit_now("run-1", {0: 9})  # a rebalance or a stop ended the run meanwhile
        assert member.committed() == {0: 5}  # sends what is pending first
    finally:
        member.close()


def test_a_run_that_starts_on_partitions_a_rebalance_took_meanwhile_is_refused(stack, prefix):
    """A query takes seconds to start: a revoke in that time finds no run
    to stop, so the run is refused as it begins (Runs.start then stops it),
    and the next run, on what the group gave instead, is accepted."""
    kafka = load(stack.environment(prefix)).kafka
    give_up, other_gives_up = threading.Event(), threading.Event()
    member = GroupMember(kafka, "starting", "textlines", give_up)
    other = GroupMember(kafka, "starting", "textlines", other_gives_up)
    joining = threading.Thread(target=partitions_within, args=(other, other_gives_up, 60))
    try:
        assert partitions_within(member, give_up, 60) == (0, 1)
        joining.start()  # the other copy joins while this one's run "starts"

        def rebalanced():
            member.poll()
            return member.partitions not in (None, (0, 1))
        wait_until(rebalanced, 60, "the partitions divided between the two members")
        assert not member.begin_run("run-1")
        assert len(partitions_within(member, give_up, 60)) == 1
        assert member.begin_run("run-2")
    finally:
        other_gives_up.set()
        if joining.ident is not None:
            joining.join()
        other.close()
        member.close()


def partitions_within(member, give_up, seconds):
    """The member's partitions, or None once `seconds` passed without any (a
    test that waits, never one that hangs the suite): `give_up` is the
    member's stop event."""
    timer = threading.Timer(seconds, give_up.set)
    timer.start()
    try:
        return member.wait_for_partitions()
    finally:
        timer.cancel()
