"""A worker's life: the one lifecycle every worker shares.

The public API, what a service imports: `Worker` (name, input topic,
topology, sink, batch size, warm-up on `kafka_records`; see
services/workers.py), its sink
(`KafkaSink`, or a `PostgresSink` whose hooks it fills: shared.worker.sinks),
`Context` (what a sink's `open` gets), `dead_letter` (a record it skips,
as the framework keeps it once: shared.dead_letters) and `main`. The framework builds and
runs the query; nothing else of shared.worker is a service's to import.
A service's `__main__` calls `main("services.<name>.worker")`: the stop
signal first, then the declaration, the configuration and Spark's JVM
(shared.worker.launch); the rest of the lifecycle is imported while the
JVM starts.

What makes a worker start and answer sooner than this lifecycle alone (a
warm-up, a small first batch, a phase, ...) is a lever: each one a switch
and a module in shared.levers, on by default, and the lifecycle runs with
all of them off.

States and transitions of a process (shared.worker.runner):

    starting ──> joining ──> running a query run ──┬──> (next run) ...
      Spark's JVM     the group, and       │       │
      starts while    Postgres migrated    │       └──> stopped: Spark and the group
      the group is    ──────────────────   │            released, exit 0
      joined          warm-up while the    │
                      group is slow, cut   │
                      as the first query   │
                      starts               v
                                 the run ends (Ended) ─> lifecycle.next_step

What ends a query run (lifecycle.Ended), and who says so:

    STOPPED      SIGTERM/SIGINT (shared.worker.launch.StopSignal), or Postgres away at a stop (foreachBatch)
    REVOKED      a rebalance (GroupMember.on_partitions_revoked -> Runs.revoke on a thread of its own, inside poll)
    RESIZED      a batch measured a new size (foreachBatch, shared.worker.exactly_once)
    FIRST_BATCH  a cold process's small first run stored its batch (Supervisor.supervise)
    FAILED       the query failed, or foreachBatch gave a batch up (an outage, a fenced batch)
    SPARK_LOST   a Spark cluster's outage took the driver's session (shared.worker.driver)

What comes next (lifecycle.next_step, a pure function over the ending and
the failures in a row):

    STOPPED ──────────────────────────────> Stop
    REVOKED, RESIZED, FIRST_BATCH ────────> Resume (after the group's next assignment)
    FAILED on a timestamp Spark can't read ─> Scan ──skipped──> Resume
                                               └──none──> as any FAILED
    FAILED, 3rd in a row, a record's error ─> Search ──skipped──> Resume (next failure searches at once)
                                                └──none──> BackOff
    FAILED otherwise ─────────────────────> BackOff(2, 4, 8 ... 30 s) -> Resume
    SPARK_LOST ───────────────────────────> NewSession(2, 4, 8 ... 30 s) -> Resume

Who owns what:

- the main thread owns the Driver and its SparkSession, the GroupMember (and its
  kafka-python consumer) and every QueryRun's start and end;
- a QueryRun (shared.worker.query_run) owns one run's starting offsets,
  abandoned batches, reported log fields and reason to end; the foreachBatch
  thread and Spark's listener thread reach it only through its locked methods;
- Spark's listener thread (BatchListener) writes each batch's log line and
  hands its offsets to the member, never blocking; the member commits them
  on its next poll on the main thread;
- the progress store (shared.worker.progress) is where each run resumes:
  the group's offsets, or Postgres's;
- a stop's budget (shared.worker.stop_budget) begins as the stop-signal
  thread sets the stop; each step of the stop, on the main thread, takes
  what is left of it;
- background threads (shared.background) run a service's side work: the
  join while Spark starts, the warm-up, retention, alert publishing and delivery.
"""

from shared.dead_letters import dead_letter
from shared.jvm_options import DriverJvm
from shared.levers.jit import Jit
from shared.levers.warm_up import kafka_records
from shared.worker.launch import main
from shared.worker.sinks import BACK_TO_BACK, STEADY_TRIGGER, KafkaSink, PostgresSink
from shared.worker.spec import Context, Topology, Worker

__all__ = ["BACK_TO_BACK", "STEADY_TRIGGER", "Context", "DriverJvm", "Jit", "KafkaSink", "PostgresSink", "Topology",
           "Worker", "dead_letter", "kafka_records", "main"]
