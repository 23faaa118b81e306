"""A micro-batch's results reach Python a part at a time, so what the driver
holds is bounded by bytes however many distinct keys a batch has."""

import math
from collections.abc import Callable, Iterator
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
