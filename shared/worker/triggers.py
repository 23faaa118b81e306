"""When a worker's micro-batches begin: its sink's trigger (a one-batch
run's: shared.levers.small_first_batch; the phase a steady batch waits
for: shared.levers.phase)."""

# A worker that keeps up starts a micro-batch at most once a second instead
# of as soon as the last one ended: a batch costs CPU beyond its records
# (planning, Spark jobs, checkpoint files, asking Kafka for offsets), and
# workers starting batches back to back took every core of a dyno at any
# rate, slowing each other's batches (docs/decisions/steady-trigger.md). On a
# backlog a batch that took longer is followed at once.
STEADY_TRIGGER_S = 1
STEADY_TRIGGER = f"{STEADY_TRIGGER_S} second"
BACK_TO_BACK = "0 seconds"  # Spark's default: each batch as the last one ends
