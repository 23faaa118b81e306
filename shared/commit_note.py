"""The metadata a worker writes with each group commit, and the web reads.

Kafka keeps one metadata string beside each committed offset. The workers
write `at=<epoch ms>` (when the commit was made) and, for a batch's commit,
`batch_ms=<ms>` (how long that batch took): so the group alone tells the
dashboard a worker's lag, the age of its last batch and its duration.
"""


def write(at_ms: int, batch_ms: int | None = None) -> str:
    return f"at={at_ms}" + ("" if batch_ms is None else f" batch_ms={batch_ms}")


def read(metadata: str) -> tuple[float | None, int | None]:
    """(commit time in epoch seconds, the batch's ms) of a commit's
    metadata, each None where it is missing or unreadable. A bare number is
    a commit time, as workers before this note wrote it."""
    if metadata.isdigit():
        return int(metadata) / 1000, None
    fields = dict(part.partition("=")[::2] for part in metadata.split())
    at, batch_ms = fields.get("at", ""), fields.get("batch_ms", "")
    return (int(at) / 1000 if at.isdigit() else None), (int(batch_ms) if batch_ms.isdigit() else None)
