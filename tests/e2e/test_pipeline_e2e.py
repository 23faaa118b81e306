"""textlines -> text processor -> words -> aggregator -> windowed_counts, with
the real workers on the real broker and Postgres: every line's words counted
once in Postgres, whatever happens to the text processor or the broker."""

import re
import signal
import time
from pathlib import Path

from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from devstack.kafka_io import group_state, produce
from devstack.local_stack import CLIENT_PRINCIPAL, wait_until
from tests.checks import assert_no_secret_in, assert_no_stack_trace, heroku_like
from tests.pipeline import (
    BATCH_LINES,
    assert_repeats_were_dropped,
    committed_lines,
    make_lines,
    send,
    wait_for_exact_counts,
    wait_inside_a_batch,
    words_written,
)


def test_text_processor_killed_inside_a_batch_counts_every_word_once(stack, prefix, database_url, workers):
    lines = make_lines(3 * BATCH_LINES)
    send(stack, prefix, lines)
    batches = {"MAX_OFFSETS_PER_TRIGGER": str(BATCH_LINES)}
    first = workers.start("services.text_processor", **batches)
    wait_inside_a_batch(stack, prefix)
    first.signal(signal.SIGKILL)
    first.wait(30)
    # Provably inside a batch: words written, their lines not committed.
    committed = sum(committed_lines(stack, prefix).values())
    processed_words = sum(len(line.split()) for line, _ in lines)
    assert 0 < committed < len(lines)
    assert words_written(stack, prefix) < processed_words

    workers.start("services.text_processor", **batches)  # a fresh checkpoint, as on a new dyno
    aggregator = workers.start("services.aggregator")
    batch_lines = wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    assert words_written(stack, prefix) > processed_words, "the restart re-sent nothing"
    assert_repeats_were_dropped(batch_lines)


def test_with_every_lever_off_the_workers_count_every_line_once(stack, prefix, database_url, workers):
    lines = make_lines(2 * BATCH_LINES)
    send(stack, prefix, lines)
    started = [workers.start(module, LEVERS_OFF="all") for module in ("services.text_processor", "services.aggregator")]
    wait_for_exact_counts(stack, prefix, database_url, started[1], lines)
    for worker in started:  # provably off: no JIT option of the worker's own, and Spark's launcher ran
        (jvm,) = [program for program in worker.programs() if program.name() == "java"]
        assert not [option for option in jvm.cmdline() if option.startswith(("-XX:Tier4", "-XX:CompilerDirectives"))]
        ignored = int(re.search(r"SigIgn:\s*([0-9a-f]+)", Path(f"/proc/{jvm.pid}/status").read_text())[1], 16)
        assert not ignored & 1 << (signal.SIGTERM - 1)  # the written command's JVM ignores SIGTERM; the launcher's not
        assert_no_stack_trace(worker.output())


def acl_write(prefix):
    return ACL(CLIENT_PRINCIPAL, "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
               ResourcePattern(ResourceType.TOPIC, prefix, ACLResourcePatternType.PREFIXED))


@heroku_like
def test_a_batch_that_fails_after_writing_part_of_its_words_counts_every_word_once(
        stack, prefix, database_url, workers):
    lines = make_lines(6 * BATCH_LINES, seed=2)
    send(stack, prefix, lines)
    worker = workers.start("services.text_processor", MAX_OFFSETS_PER_TRIGGER=str(BATCH_LINES))
    # The broker refuses the rest of a batch being written. A warm batch may
    # end before the refusal takes effect (it then fails the next batch,
    # which wrote nothing): refused again, inside a later batch, until the
    # failed one provably wrote part of its words.
    for _ in range(4):
        wait_inside_a_batch(stack, prefix)
        failures = worker.output().count("event=query_failed")
        with stack.broker.admin() as admin:
            admin.delete_acls([ACLFilter(CLIENT_PRINCIPAL, "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                                         ResourcePatternFilter(ResourceType.TOPIC, prefix,
                                                               ACLResourcePatternType.PREFIXED))])
        try:
            wait_until(lambda: worker.output().count("event=query_failed") > failures, 240, "the batch failing")
            # Words on the topic that no stored batch wrote: the failed one's.
            partly_written = words_written(stack, prefix) - sum(int(b["rows_out"]) for b in worker.log_lines("batch"))
        finally:
            with stack.broker.admin() as admin:
                admin.create_acls([acl_write(prefix)])
        if partly_written > 0:
            break
    assert partly_written > 0, "the refusal never came inside a batch"
    assert sum(committed_lines(stack, prefix).values()) < len(lines)
    aggregator = workers.start("services.aggregator")
    batch_lines = wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    assert_repeats_were_dropped(batch_lines)
    assert "Traceback" not in worker.output()
    assert_no_secret_in("".join(w.output() for w in workers.started), stack.environment(prefix))


def test_broker_killed_while_the_workers_start_delays_them_and_loses_nothing(
        stack, prefix, database_url, workers):
    lines = make_lines(2000, seed=3)
    send(stack, prefix, lines)
    stack.broker.kill()
    try:
        text_processor = workers.start("services.text_processor")
        aggregator = workers.start("services.aggregator")
        for worker in (text_processor, aggregator):
            wait_until(lambda: "event=kafka_unavailable" in worker.output(), 240,
                       f"{worker.log_path} waiting for the broker")
    finally:
        stack.broker.start()
    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    for worker in (text_processor, aggregator):
        assert worker.process.poll() is None
        assert "Traceback" not in worker.output()


def test_broker_killed_mid_stream_delays_the_workers_and_loses_nothing(stack, prefix, database_url, workers):
    lines = make_lines(3 * BATCH_LINES, seed=4)
    send(stack, prefix, lines)
    aggregator = workers.start("services.aggregator")  # rides the outage too, inside its batches
    text_processor = workers.start("services.text_processor", MAX_OFFSETS_PER_TRIGGER=str(BATCH_LINES))
    wait_inside_a_batch(stack, prefix)
    stack.broker.kill()
    try:
        wait_until(lambda: "event=kafka_unavailable" in text_processor.output()
                   or "event=query_failed" in text_processor.output(), 180, "the worker noticing")
    finally:
        stack.broker.start()
    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    for worker in (text_processor, aggregator):
        assert worker.process.poll() is None
        assert_no_stack_trace(worker.output())


def test_sigterm_while_the_broker_is_down_ends_every_workers_processes_within_30_s(
        stack, prefix, database_url, workers):
    """A deploy or a daily restart during a broker failover: each copy's
    whole process group (Python and its JVM) is gone within the contract's
    30 s, as Heroku's SIGKILL would otherwise end it (R12). Named as dynos
    are: static members, which also remove themselves from their groups."""
    send(stack, prefix, make_lines(2000, seed=7))
    produce(stack, prefix + "loglines", [f"user_id: u{n} | action: login failed" for n in range(100)])
    running = [workers.start(module, DYNO=f"{module.rsplit('.', 1)[1]}_worker.1", **batches) for module, batches in
               (("services.text_processor", {"MAX_OFFSETS_PER_TRIGGER": str(2 * BATCH_LINES)}),
                ("services.aggregator", {}), ("services.anomaly_detector", {}))]
    for worker in running:
        wait_until(lambda: worker.log_lines("batch"), 240, f"{worker.log_path}: a first batch")
    # The broker dies under the text processor's batch, which then can never
    # finish: the stop waits for it as long as it may, then cuts it. The
    # lines are sent while the text processor is paused, so it reads them in
    # full batches (two of 2 * BATCH_LINES), each seconds long, not in small
    # ones as they arrive, and the broker dies inside one.
    running[0].signal(signal.SIGSTOP)
    send(stack, prefix, make_lines(4 * BATCH_LINES, seed=8))
    running[0].signal(signal.SIGCONT)
    wait_inside_a_batch(stack, prefix)
    stack.broker.kill()
    try:
        for worker in running:
            worker.signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for worker in running:
            wait_until(worker.group_gone, max(0.0, deadline - time.monotonic()), f"{worker.log_path}: gone")
            assert worker.process.returncode == 0
    finally:
        stack.broker.start()
    for worker in running:
        assert_no_stack_trace(worker.output())
        after_the_stop = worker.output().split("event=stop_requested", 1)[1]
        assert "event=query_failed" not in after_the_stop  # a stop is not retried
    assert "event=batch_cut" in running[0].output().split("event=stop_requested", 1)[1]


def test_text_processor_copies_joining_and_leaving_in_a_broker_outage_count_every_word_once(
        stack, prefix, database_url, workers):
    lines = make_lines(4 * BATCH_LINES, seed=5)
    send(stack, prefix, lines[:3 * BATCH_LINES])
    # Batches small enough that the backlog outlasts a copy's start-up.
    small_batches = {"MAX_OFFSETS_PER_TRIGGER": "1000"}
    first = workers.start("services.text_processor", **small_batches)
    wait_inside_a_batch(stack, prefix)
    second = workers.start("services.text_processor", **small_batches)  # joins: a rebalance
    wait_until(lambda: second.log_lines("batch"), 240, "the second copy's first batch")
    # The first copy leaves while the second is frozen (a long pause): the
    # group then waits for the second to rejoin, and the broker dies in that
    # rebalance. The second wakes into the outage (as long as the broker takes
    # to start again), and takes both partitions over once the broker is back.
    second.signal(signal.SIGSTOP)
    try:
        # Sent while the second is frozen: its partition's 10,000 new lines
        # are still there to hand over, however fast the copies ran so far.
        send(stack, prefix, lines[3 * BATCH_LINES:])
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0
        assert group_state(stack, prefix + "text-processor-app") == "PreparingRebalance"
        stack.broker.kill()
    finally:
        second.signal(signal.SIGCONT)
    stack.broker.start()
    assert sum(committed_lines(stack, prefix).values()) < len(lines), "nothing was left to hand over"
    aggregator = workers.start("services.aggregator")
    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    assert [line["partitions"] for line in second.log_lines("partitions_assigned")][-1] == "0,1"
    assert "Traceback" not in first.output() + second.output()
