"""The phase lever: a steady micro-batch of a sink with a `phase_s` (the
aggregator's) holds its end until the next batch may begin that far past
a second. Off, every worker's batches begin on the second
(docs/decisions/steady-trigger.md)."""


def wait_for_phase(began: float, now: float, phase_s: float, interval_s: float) -> float:
    """Seconds a steady micro-batch that began at `began` and ended at `now`
    (epoch seconds) waits before it returns, so that the next one begins
    `phase_s` past a second.

    Spark begins a trigger's batches on the multiples of its interval
    (`interval_s`) since the epoch (ProcessingTimeExecutor.nextBatchTime),
    and at once after a batch that ran past its next one. So every worker
    on the steady trigger, on any host whose clock keeps time, begins on
    the second, and a worker that reads another's output found only what
    that one wrote a second before
    (docs/decisions/steady-trigger.md, "Half a second behind the text
    processor"). A batch that returns at a phase point past the second its
    trigger began in has the next one begin there. Never more than an
    interval and the phase: a clock stepped back during the batch (NTP)
    must not hold the worker for as long."""
    next_trigger = (began // interval_s + 1) * interval_s  # Spark's, at the latest
    last_point = now - (now - phase_s) % interval_s
    if began < last_point and now >= next_trigger:
        return 0.0  # a long batch (a backlog): what was written since the point it passed waits
    return min(next_trigger + phase_s - now, interval_s + phase_s)

