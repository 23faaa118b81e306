"""Send chosen dead letters back to their input topic, once each, and mark them replayed.

    python -m services.replay --worker text-processor [--reason too_long]
        [--since 2026-12-01T00:00:00Z] [--until 2026-12-02T00:00:00Z] [--dry-run]

(on Heroku: `heroku run python -m services.replay ...`). Chosen: the dead
letters of that worker (and reason) skipped in [since, until) that are not
marked replayed. Each goes back to the partition it came from, with its key
and value as kept, its timestamp if that was a plausible time (else the
broker's now), and a header `dead_letter_replay` naming it.

Once each, even if the command is interrupted and run again: before a chunk
is sent, each of its letters is marked with its partition's end offset
(`replay_sent_from`); once the brokers have the chunk, it is marked
replayed. A run that finds letters marked but not replayed looks for them
on their partitions from that offset on, by their header: those found are
marked replayed, the others are sent again.
"""

import argparse
import datetime
import sys
import threading
from collections.abc import Iterable
from typing import Any

from kafka import KafkaProducer
from sqlalchemy import Engine, create_engine, text

from shared import config as config_module
from shared import dead_letters
from shared.config import KafkaConfig
from shared.logs import log
from shared.topic_reader import TopicReader

CHUNK = 50  # letters a round: their values (up to 1 MB each) are held in memory while they are sent
SCAN_TIMEOUT_S = 120
CHOSEN = """
    worker = :worker AND (CAST(:reason AS text) IS NULL OR reason = :reason)
    AND skipped_at >= :since AND skipped_at < :until AND replayed_at IS NULL"""
IN_DOUBT = text(f"""
    SELECT topic, partition, "offset", replay_sent_from FROM dead_letters
    WHERE {CHOSEN} AND replay_sent_from IS NOT NULL""")
NEXT_CHUNK = text(f"""
    SELECT topic, partition, "offset", timestamp_ms, key, value FROM dead_letters
    WHERE {CHOSEN} ORDER BY topic, partition, "offset" LIMIT :chunk""")
MARK_SENDING = text("""
    UPDATE dead_letters SET replay_sent_from = :sent_from
    WHERE worker = :worker AND topic = :topic AND partition = :partition AND "offset" = :offset""")
MARK_REPLAYED = text("""
    UPDATE dead_letters SET replayed_at = now()
    WHERE worker = :worker AND topic = :topic AND partition = :partition AND "offset" = :offset""")
EVER = (datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc),
        datetime.datetime(9999, 1, 1, tzinfo=datetime.timezone.utc))


def replay(engine: Engine, kafka: KafkaConfig, worker: str, reason: str | None = None,
           since: datetime.datetime = EVER[0], until: datetime.datetime = EVER[1]) -> dict[str, int]:
    """{"found": letters an interrupted run had sent, now marked; "sent": letters sent now}."""
    chosen = {"worker": worker, "reason": reason, "since": since, "until": until}
    with engine.connect() as connection:
        in_doubt = connection.execute(IN_DOUBT, chosen).all()
    found = already_sent(kafka, worker, in_doubt)
    with engine.begin() as connection:
        mark(connection, MARK_REPLAYED, worker, found)
    sent = 0
    producer = KafkaProducer(**kafka.kafka_python_kwargs(), acks="all",
                             max_request_size=dead_letters.KEPT_BYTES + (48 << 10))
    try:
        while True:
            with engine.connect() as connection:
                chunk = connection.execute(NEXT_CHUNK, {**chosen, "chunk": CHUNK}).all()
            if not chunk:
                break
            ends = end_offsets(kafka, {(row.topic, row.partition) for row in chunk})
            with engine.begin() as connection:
                connection.execute(MARK_SENDING, [
                    {"worker": worker, "topic": row.topic, "partition": row.partition, "offset": row.offset,
                     "sent_from": ends[(row.topic, row.partition)]} for row in chunk])
            now_ms = int(datetime.datetime.now(datetime.timezone.utc).timestamp() * 1000)
            futures = []
            for row in chunk:
                plausible = row.timestamp_ms is not None and 0 <= row.timestamp_ms <= now_ms
                futures.append(producer.send(row.topic, partition=row.partition, key=row.key, value=row.value,
                                          timestamp_ms=row.timestamp_ms if plausible else None,
                                          headers=[(dead_letters.REPLAY_HEADER, dead_letters.name(
                                              worker, row.topic, row.partition, row.offset).encode())]))
            producer.flush()
            for each in futures:
                each.get()  # raises what the brokers answered, if not taken: the rest stays marked
            with engine.begin() as connection:
                mark(connection, MARK_REPLAYED, worker, [(row.topic, row.partition, row.offset) for row in chunk])
            sent += len(chunk)
    finally:
        producer.close()
    return {"found": len(found), "sent": sent}


def already_sent(kafka: KafkaConfig, worker: str, in_doubt: Iterable[Any]) -> list[tuple[str, int, int]]:
    """Of letters marked as being sent, those their partition holds (by the
    replay header) from the offset each was marked with."""
    by_partition: dict[tuple[str, int], dict[str, tuple[str, int, int]]] = {}
    first: dict[tuple[str, int], int] = {}
    for row in in_doubt:
        at = (row.topic, row.partition)
        by_partition.setdefault(at, {})[dead_letters.name(worker, *at, row.offset)] = (row.topic, row.partition,
                                                                                        row.offset)
        first[at] = min(first.get(at, row.replay_sent_from), row.replay_sent_from)
    found = []
    for (topic, partition), names in by_partition.items():
        with TopicReader(kafka, topic, [partition]) as reader:
            reader.seek({partition: first[(topic, partition)]})
            for record in reader.records(reader.latest(), SCAN_TIMEOUT_S, threading.Event()):
                said = dict(record.headers or []).get(dead_letters.REPLAY_HEADER)
                if said is not None and said.decode() in names:
                    found.append(names.pop(said.decode()))
                    if not names:
                        break
    return found


def end_offsets(kafka: KafkaConfig, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    ends = {}
    for topic in {topic for topic, _ in partitions}:
        with TopicReader(kafka, topic, sorted(p for t, p in partitions if t == topic)) as reader:
            ends.update({(topic, partition): end for partition, end in reader.latest().items()})
    return ends


def mark(connection: Any, statement: Any, worker: str, letters: list[tuple[str, int, int]]) -> None:
    if letters:
        connection.execute(statement, [{"worker": worker, "topic": topic, "partition": partition, "offset": offset}
                                       for topic, partition, offset in letters])


def moment(value: str) -> datetime.datetime:
    parsed = datetime.datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError("give a time with its zone, e.g. 2026-12-01T00:00:00Z")
    return parsed


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.replay", description=__doc__.split("\n")[0])
    parser.add_argument("--worker", required=True, help="the worker that skipped them (text-processor, ...)")
    parser.add_argument("--reason", choices=sorted(dead_letters.REASONS))
    parser.add_argument("--since", type=moment, default=EVER[0], help="skipped at or after (ISO 8601, with a zone)")
    parser.add_argument("--until", type=moment, default=EVER[1], help="skipped before (ISO 8601, with a zone)")
    parser.add_argument("--dry-run", action="store_true", help="count the chosen letters, send nothing")
    args = parser.parse_args(argv)
    config = config_module.load(needs_database=True)
    assert config.kafka is not None
    engine = create_engine(config.database_url)
    try:
        if args.dry_run:
            with engine.connect() as connection:
                chosen = connection.execute(text(f"SELECT count(*) FROM dead_letters WHERE {CHOSEN}"), {
                    "worker": args.worker, "reason": args.reason, "since": args.since, "until": args.until}).scalar()
            log("replay_chosen", worker=args.worker, reason=args.reason or "any", letters=chosen)
            return
        done = replay(engine, config.kafka, args.worker, args.reason, args.since, args.until)
        log("replayed", worker=args.worker, reason=args.reason or "any", **done)
    finally:
        engine.dispose()


if __name__ == "__main__":
    main(sys.argv[1:])
