"""How long the generators sleep between lines (devstack.generator.pause):
a step of lines at a time, never one sleep per line at a high rate."""

import pytest

from devstack.generator import PACE_S, pause


def test_lines_go_out_without_a_sleep_until_a_step_of_them_is_early():
    assert pause(sent=1, rate=500, elapsed=0.0) == 0.0
    assert pause(sent=24, rate=500, elapsed=0.0) == 0.0


def test_a_step_of_lines_early_sleeps_until_the_last_of_them_is_due():
    assert pause(sent=25, rate=500, elapsed=0.0) == PACE_S
    assert pause(sent=1000, rate=500, elapsed=1.9) == pytest.approx(0.1)


def test_a_slow_rate_still_sleeps_between_lines_and_a_late_stream_never():
    assert pause(sent=1, rate=10, elapsed=0.0) == 0.1
    assert pause(sent=1000, rate=500, elapsed=3.0) == 0.0
