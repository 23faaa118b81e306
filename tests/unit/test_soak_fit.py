"""The soak benchmark's slope and its noise (benchmarks.soak.fit): a pure
function, no services."""

import pytest

from benchmarks.soak import fit


def test_a_straight_line_has_its_slope_and_no_error():
    slope, error = fit([(minute, 600 + 0.5 * minute) for minute in range(30)], lag=5)
    assert slope == pytest.approx(0.5)
    assert error == pytest.approx(0.0, abs=1e-9)


def test_steps_minutes_apart_count_as_more_noise_than_independent_samples():
    # Flat memory that jumps up and down by 10 MB every 5 minutes (20
    # samples of 15 s): neighbouring samples share their step.
    series = [(i / 4, 600 + (10 if (i // 20) % 2 else 0)) for i in range(120)]
    slope, independent = fit(series, lag=0)
    _, correlated = fit(series, lag=20)
    assert abs(slope) <= 2 * correlated  # flat, within its noise
    assert correlated > 2 * independent


def test_too_few_samples_have_no_slope():
    assert fit([(0, 600), (1, 700)], lag=5) == (0.0, 0.0)
