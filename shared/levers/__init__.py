"""The start-up and latency levers: what makes a worker start, and answer,
sooner than its lifecycle alone would. Each was measured against going
without it, each is one switch, on by default, and the lifecycle reads and
runs with every one of them off: `LEVERS_OFF` names those to turn off,
comma-separated, or `all` (for `make bench`'s `levers` case, which shows
each one's worth, or to rule one out in production). Each switch below
says in one line what its lever does, and where it was decided; its code
is this package's module of the same name, and the lifecycle
(shared.worker) calls it in one place, behind its switch. (The
kafka-python join fix, shared.worker.kafka_join, is no lever: without it
a copy may wait without partitions for good.)

The switches are read once per process, from its environment, when first imported.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from shared.config import ConfigError


@dataclass(frozen=True)
class Levers:
    # Spark runs the topology on made-up records while the group answers: docs/decisions/warm-up.md
    warm_up: bool = True
    # A cold process's first run reads one small batch of one partition: docs/decisions/cold-start.md
    small_first_batch: bool = True
    # A steady batch ends at its sink's phase of a second (the aggregator's): docs/decisions/steady-trigger.md
    phase: bool = True
    # Spark's driver JVM started with a command written here, not by its launcher: docs/decisions/start-up.md
    driver_command: bool = True
    # Each worker's own JIT (Worker.jvm.jit), not HotSpot's default: docs/decisions/jit.md
    jit: bool = True
    # Spark's batch reports cross Py4J as one JSON string, not field by field: docs/decisions/py4j.md
    json_listener: bool = True


NAMES = tuple(lever.name for lever in fields(Levers))


def from_environment(environ: Mapping[str, str]) -> Levers:
    """The levers LEVERS_OFF leaves on."""
    off = {name.strip() for name in environ.get("LEVERS_OFF", "").split(",") if name.strip()}
    if off == {"all"}:
        off = set(NAMES)
    if off - set(NAMES):
        raise ConfigError("LEVERS_OFF", f"names a lever there is not (there are {', '.join(NAMES)}, or all)")
    return Levers(**{name: name not in off for name in NAMES})


LEVERS = from_environment(os.environ)
