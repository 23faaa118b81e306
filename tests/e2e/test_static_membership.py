"""Copies on dynos are static members of their group (DYNO names them,
KIP-345): a copy killed and restarted under its name takes its partitions
back at once, a copy stopped for good hands them over at once, and a
deploy's overlap (the old copy finishing its batch while the new one of the
same name starts) is fenced. Each fault lands inside a text processor's
batch, and every line is counted once in Postgres.

"At once" is asserted against the group's session timeout, which is what a
dynamic member's partitions wait out after a kill, and a static member's
after a stop that did not remove it."""

import signal

from devstack.local_stack import wait_until
from shared.worker.group_member import SESSION_TIMEOUT_MS
from tests.checks import assert_no_stack_trace
from tests.pipeline import (
    BATCH_LINES,
    committed_lines,
    make_lines,
    send,
    wait_for_exact_counts,
    wait_inside_a_batch,
    words_written,
)

WITHIN_THE_SESSION_S = SESSION_TIMEOUT_MS / 1000 - 5
BATCHES = {"MAX_OFFSETS_PER_TRIGGER": str(BATCH_LINES)}
DYNO = "text_processor_worker.1"


def assigned(worker):
    """The partitions the worker was given last ("" before any)."""
    lines = worker.log_lines("partitions_assigned")
    return lines[-1]["partitions"] if lines else ""


def test_a_copy_killed_inside_a_batch_and_restarted_under_its_name_takes_its_partitions_back_at_once(
        stack, prefix, database_url, workers):
    lines = make_lines(3 * BATCH_LINES, seed=11)
    send(stack, prefix, lines)
    first = workers.start("services.text_processor", DYNO=DYNO, **BATCHES)
    wait_inside_a_batch(stack, prefix)
    first.signal(signal.SIGKILL)
    first.wait(30)
    at_kill = words_written(stack, prefix)
    assert 0 < sum(committed_lines(stack, prefix).values()) < len(lines)

    restarted = workers.start("services.text_processor", DYNO=DYNO, **BATCHES)
    wait_until(lambda: assigned(restarted) == "0,1", WITHIN_THE_SESSION_S,
               "the partitions, before the killed copy's session ran out")
    aggregator = workers.start("services.aggregator")
    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    assert words_written(stack, prefix) > at_kill


def test_a_copy_stopped_for_good_hands_its_partitions_over_at_once(stack, prefix, database_url, workers):
    lines = make_lines(3 * BATCH_LINES, seed=12)
    send(stack, prefix, lines)
    small = {"MAX_OFFSETS_PER_TRIGGER": "1000"}  # a backlog that outlasts the second copy's start
    leaving = workers.start("services.text_processor", DYNO="text_processor_worker.1", **small)
    staying = workers.start("services.text_processor", DYNO="text_processor_worker.2", **small)
    wait_until(lambda: leaving.log_lines("batch") and staying.log_lines("batch") and assigned(staying) != "0,1",
               240, "a batch of each copy, on a partition each")

    leaving.signal(signal.SIGTERM)  # batches follow each other: it lands inside one
    wait_until(lambda: assigned(staying) == "0,1", WITHIN_THE_SESSION_S,
               "the partitions handed over, before the leaving copy's session ran out")
    assert leaving.wait(30) == 0
    assert sum(committed_lines(stack, prefix).values()) < len(lines), "nothing was left to hand over"
    aggregator = workers.start("services.aggregator")
    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    assert_no_stack_trace(leaving.output())


def test_a_deploys_overlap_of_two_copies_of_one_name_is_fenced_and_counts_every_word_once(
        stack, prefix, database_url, workers):
    lines = make_lines(3 * BATCH_LINES, seed=13)
    send(stack, prefix, lines)
    old = workers.start("services.text_processor", DYNO=DYNO, **BATCHES)
    wait_inside_a_batch(stack, prefix)
    # The old copy is held inside its batch while the new one of its name
    # starts and takes its place: the overlap, by construction.
    old.signal(signal.SIGSTOP)
    try:
        new = workers.start("services.text_processor", DYNO=DYNO, **BATCHES)
        wait_until(lambda: assigned(new) == "0,1", 120, "the new copy given the old one's partitions")
        old.signal(signal.SIGTERM)  # the deploy's stop, which it sees as it goes on with its batch
    finally:
        old.signal(signal.SIGCONT)
    assert old.wait(30) == 0

    aggregator = workers.start("services.aggregator")
    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    fenced = [line for event in ("commit_failed", "leave_failed") for line in old.log_lines(event)]
    assert {line["error"] for line in fenced} == {"FencedInstanceIdError"}, old.output()[-3000:]
    assert_no_stack_trace(old.output())
