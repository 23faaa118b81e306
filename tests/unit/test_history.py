"""The web process's hour of lag and batch durations, the dashboard's small charts."""

from services.web.history import History


def health(worker, lag, at=None, batch_ms=None):
    return {"worker": worker, "lag": lag, "last_commit_at": at, "last_batch_ms": batch_ms}


def test_each_sample_adds_a_lag_and_each_new_commit_one_batch():
    history = History(span_s=60, every_s=10)
    history.add(100, [health("aggregator", 50, at=95, batch_ms=1200), health("text-processor", 7)])
    history.add(110, [health("aggregator", 20, at=95, batch_ms=1200), health("text-processor", 9)])  # the same commit
    history.add(120, [health("aggregator", 0, at=118, batch_ms=900), health("text-processor", 3, at=119)])
    assert history.read() == [
        {"worker": "aggregator", "lag": [(100, 50), (110, 20), (120, 0)], "batches": [(95, 1200), (118, 900)]},
        {"worker": "text-processor", "lag": [(100, 7), (110, 9), (120, 3)], "batches": []},  # no duration noted
    ]


def test_kafka_away_is_a_gap_in_every_line():
    history = History(span_s=60, every_s=10)
    history.add(100, [health("aggregator", 5)])
    history.add(110, None)
    history.add(120, [health("aggregator", 4)])
    assert history.read()[0]["lag"] == [(100, 5), (110, None), (120, 4)]


def test_only_the_span_is_kept_however_long_it_runs():
    history = History(span_s=60, every_s=10)
    for n in range(1000):
        history.add(n * 10, [health("aggregator", n, at=n * 10 - 1, batch_ms=n)])
    (kept,) = history.read()
    assert [at for at, _ in kept["lag"]] == [9930, 9940, 9950, 9960, 9970, 9980, 9990]
    assert [at for at, _ in kept["batches"]] == [9939, 9949, 9959, 9969, 9979, 9989]


def test_samples_crowded_by_late_rounds_stay_bounded():
    history = History(span_s=60, every_s=10)
    for n in range(10_000):
        history.add(1000 + n / 1000, [health("aggregator", n, at=1000 + n / 1000, batch_ms=1)])
    (kept,) = history.read()
    assert len(kept["lag"]) == len(kept["batches"]) == 16  # 60 / 10 samples and 10 more
