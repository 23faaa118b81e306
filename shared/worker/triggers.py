"""When a worker's micro-batches begin: its sink's trigger, a one-batch
run's, and the phase a steady batch waits for."""

# A worker that keeps up starts a micro-batch at most once a second instead
# of as soon as the last one ended: a batch costs CPU beyond its records
# (planning, Spark jobs, checkpoint files, asking Kafka for offsets), and
# workers starting batches back to back took every core of a dyno at any
# rate, slowing each other's batches (docs/benchmarks.md, `latency`). On a
# backlog a batch that took longer is followed at once.
STEADY_TRIGGER_S = 1
STEADY_TRIGGER = f"{STEADY_TRIGGER_S} second"
BACK_TO_BACK = "0 seconds"  # Spark's default: each batch as the last one ends
# A query run meant to store one batch (a cold start's small first one)
# begins it as it starts, and its next trigger lies on the next multiple of
# this interval since the epoch, in 2069: the run is stopped with no batch
# running. On the steady trigger a second small batch would begin at once
# behind a cold first batch (longer than the interval), and the stop would
# wait for it.
ONE_BATCH_TRIGGER = "36500 days"


def wait_for_phase(began: float, now: float, phase_s: float) -> float:
    """Seconds a steady micro-batch that began at `began` and ended at `now`
    (epoch seconds) waits before it returns, so that the next one begins
    `phase_s` past a second.

    Spark begins a trigger's batches on the multiples of its interval since
    the epoch (ProcessingTimeExecutor.nextBatchTime), and at once after a
    batch that ran past its next one. So every worker on STEADY_TRIGGER, on
    any host whose clock keeps time, begins on the second, and a worker that
    reads another's output found only what that one wrote a second before
    (docs/decisions/steady-trigger.md, "Half a second behind the text
    processor"). A batch that returns at a phase point past the second its
    trigger began in has the next one begin there. Never more than an
    interval and the phase: a clock stepped back during the batch (NTP)
    must not hold the worker for as long."""
    next_trigger = (began // STEADY_TRIGGER_S + 1) * STEADY_TRIGGER_S  # Spark's, at the latest
    last_point = now - (now - phase_s) % STEADY_TRIGGER_S
    if began < last_point and now >= next_trigger:
        return 0.0  # a long batch (a backlog): what was written since the point it passed waits
    return min(next_trigger + phase_s - now, STEADY_TRIGGER_S + phase_s)

