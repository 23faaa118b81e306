"""When a steady micro-batch lets the next one begin (shared.levers.phase.wait_for_phase):
Spark begins a 1-second trigger's batches on the second, or at once after a
batch that ran past its next second; a batch that returns later has the next
one begin where it returned."""

import pytest

from shared.levers.phase import wait_for_phase

SECOND = 1_764_300_000.0  # a whole second since the epoch
PHASE_S = 0.5


def next_begins(began, ended):
    """When Spark begins the next batch: at the next second after its trigger
    (shortly before `began`), or at once if that has passed as it returns."""
    returned = ended + wait_for_phase(began, ended, PHASE_S, 1)
    return max(returned, int(began - 0.05) + 1.0)


@pytest.mark.parametrize("began, ended", [(0.55, 1.2), (0.6, 0.9), (0.52, 1.49), (0.95, 1.3)])
def test_a_batch_begun_at_the_phase_has_the_next_begin_at_the_next_phase(began, ended):
    assert next_begins(SECOND + began, SECOND + ended) == pytest.approx(SECOND + 1.5)


def test_a_batch_begun_on_the_second_has_the_next_begin_at_the_phase_past_sparks_next_second():
    """The first batch after an idle stream: returned at 0.65 s, Spark would
    wait for the next second, and every batch after it would begin on the
    second too."""
    assert next_begins(SECOND + 0.05, SECOND + 0.65) == pytest.approx(SECOND + 1.5)
    assert next_begins(SECOND + 0.05, SECOND + 0.3) == pytest.approx(SECOND + 1.5)


@pytest.mark.parametrize("began, ended", [(0.55, 1.6), (0.1, 4.2), (0.95, 2.0)])
def test_a_batch_that_ran_past_a_phase_and_its_next_second_has_the_next_begin_at_once(began, ended):
    """A backlog's long batch, or a steady one that ran late: records
    written since the phase it passed are waiting."""
    assert wait_for_phase(SECOND + began, SECOND + ended, PHASE_S, 1) == 0
    assert next_begins(SECOND + began, SECOND + ended) == pytest.approx(SECOND + ended)


def test_the_batches_after_a_late_one_begin_at_the_phase_again():
    began = SECOND + 0.55
    for took in (1.05, 0.6, 0.7, 0.4):  # late once, then steady
        began = next_begins(began, began + took) + 0.05  # its foreachBatch is called after its plan
    assert began - 0.05 == pytest.approx(SECOND + 4.5)


def test_a_clock_stepped_back_during_the_batch_holds_it_no_longer_than_an_interval_and_the_phase():
    assert wait_for_phase(SECOND + 0.55, SECOND - 3600.0, PHASE_S, 1) == pytest.approx(1.5)
