"""Stream lines to a topic at a chosen rate, showing progress: the loop the
generators share (textlines.py, loglines.py: demos, `make run`, benchmarks)."""

import argparse
import itertools
import time
from collections.abc import Iterable

from kafka import KafkaProducer

from shared import config as config_module
from shared.logs import log


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rate", type=float, default=100.0,
                        help="lines per second; 0 for as fast as possible (default 100)")
    parser.add_argument("--count", type=int, default=None,
                        help="stop after this many lines (default: never)")
    return parser


# Lines go out in steps of at least this long, not one sleep per line: at
# 500 lines a second that took twice the CPU, on the cores the benchmarks'
# workers share with their load (docs/decisions/slow-hour.md). To workers
# whose batches are a second apart the stream is the same.
PACE_S = 0.05


def pause(sent: int, rate: float, elapsed: float) -> float:
    """Seconds to sleep after `sent` lines in `elapsed` seconds at `rate`
    lines a second: none until a step's worth of lines has gone out early."""
    ahead = sent / rate - elapsed
    return ahead if ahead >= PACE_S else 0.0


def stream(topic: str, lines: Iterable[bytes], rate: float, count: int | None = None,
           progress_every: float = 1.0) -> int:
    """Send `lines` (bytes) to `<prefix><topic>`; returns how many were sent."""
    kafka = config_module.load().kafka
    assert kafka is not None  # load() parses Kafka's variables unless told not to
    producer = KafkaProducer(**kafka.kafka_python_kwargs(), linger_ms=20, acks=1,
                             max_request_size=1_048_000)
    # The clock starts once the topic's metadata is in: the first send would
    # wait for it, and the lines behind it would then go out at once to catch up.
    producer.partitions_for(kafka.topic(topic))
    began = last_report = time.monotonic()
    sent = 0
    try:
        for line in itertools.islice(lines, count):
            producer.send(kafka.topic(topic), line)
            sent += 1
            now = time.monotonic()
            if rate > 0 and (wait := pause(sent, rate, now - began)):
                time.sleep(wait)
            if now - last_report >= progress_every:
                last_report = now
                log("progress", topic=kafka.topic(topic), sent=sent,
                    rate_per_s=sent / max(now - began, 1e-9))
    except KeyboardInterrupt:
        pass
    finally:
        producer.flush()
        producer.close()
    elapsed = time.monotonic() - began
    log("generated", topic=kafka.topic(topic), sent=sent, seconds=elapsed)
    return sent
