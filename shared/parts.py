"""A micro-batch's results reach Python a part at a time, so what the driver
holds is bounded by bytes however many distinct keys a batch has."""

import math
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from pyspark.sql import Column
from pyspark.sql import functions as F

T = TypeVar("T")


def in_part(parts: int, part: int, *columns: str) -> Column:
    """Whether a row is in `part` of `parts` parts of about equal size, by a hash of `columns`."""
    return F.pmod(F.xxhash64(*columns), F.lit(parts)) == part


def collected_in_parts(total_bytes: int, part_bytes: int, collect: Callable[[int, int], T]) -> Iterator[T]:
    """collect(parts, part) for each part, one at a time, of as many parts as
    keep each near `part_bytes` of the `total_bytes`."""
    parts = math.ceil(total_bytes / part_bytes)
    return (collect(parts, part) for part in range(parts))


def one_ahead(parts: Iterator[T]) -> Iterator[T]:
    """`parts`, the next one made on a thread of its own (a Spark job, with
    the caller's Spark properties) while the caller uses this one."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.util import inheritable_thread_target

    with ThreadPoolExecutor(1, thread_name_prefix="next-part") as pool:
        following = inheritable_thread_target(lambda: next(parts, None))
        coming = pool.submit(following)
        while (part := coming.result()) is not None:
            coming = pool.submit(following)
            yield part


class CopySource:
    """A batch's COPY text as a file of bytes, read a slice at a time: the
    text is ASCII (hex words), so no second whole copy is made (io.StringIO
    held 4 bytes a character; joining a part to its newline, one more)."""

    def __init__(self, parts: Iterable[str]) -> None:
        self.parts, self.text, self.at = iter(parts), "", 0

    def read(self, size: int) -> bytes:
        while self.at >= len(self.text):
            part = next(self.parts, None)
            if part is None:
                return b""
            if part:
                follows_a_part = bool(self.text)
                self.text, self.at = part, 0
                if follows_a_part:  # end the last line of the part before
                    return b"\n"
        chunk, self.at = self.text[self.at:self.at + size], self.at + size
        return chunk.encode("ascii")
