"""loglines -> failed logins per (user, window) of one micro-batch, in Spark SQL.

A line is a failed login when it contains `login failed`. Its user id is its
first `|`-separated field, trimmed, with a leading `user_id:` label removed
(`user_id: alice | timestamp: ... | action: login failed` is `alice`; so is
`alice|...`). Event time is the line's Kafka timestamp; windows are tumbling
and aligned to the epoch, as the aggregator's.

Failed logins without a user id, or with one Postgres cannot keep as a key
(shared.events.storable_key), are counted under the user "" so that one
aggregation gives both the counts and how many lines were skipped; those
whose timestamp is not a plausible event time (shared.events) likewise, with
no window; each of those lines is a dead letter (`dead_letters`). A batch's
counts are summed up in Spark (`summary`), or in Python once a small
batch's are collected (`summed_up`).
"""

import functools
from collections.abc import Iterable
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from shared.events import MAX_KEY_BYTES, plausible_millis, storable_key, window_start
from shared.parts import in_part
from shared.worker import dead_letter

FAILED_LOGIN = "login failed"
NO_USER = ""


def user_id(line: Column) -> Column:
    first_field = F.split(line, r"\|", 2)[0]
    unlabelled = F.regexp_replace(first_field, r"(?U)^\s*user_id\s*:", "")
    return F.regexp_replace(unlabelled, r"(?U)^\s+|\s+$", "")


def failed_logins(lines: DataFrame, window_seconds: int) -> DataFrame:
    """Columns: user, window_start (epoch s), count. User NO_USER counts the
    lines skipped: with no window, for a bad timestamp; else for no usable user."""
    is_failed_login, user_and_window = _line_columns(window_seconds)
    return lines.where(is_failed_login).select(*user_and_window).groupBy("user", "window_start").count()


def dead_letters(lines: DataFrame) -> DataFrame:
    """Each failed login's dead letter: `bad_time`, else `no_user`, else null
    (counted). The user id, then the reason, each in a projection of its
    own: Spark evaluates an expression in every place that names it, and
    the user id's regular expressions were most of a flood's time."""
    line = F.col("value").cast("string")
    user, reason = F.col("user"), F.col("reason")
    skipped = (F.when(~plausible_millis(F.unix_millis("timestamp")), F.lit("bad_time"))
               .when(~F.coalesce(storable_key(user), F.lit(False)) | (user == NO_USER), F.lit("no_user")))
    return (lines.where(line.contains(FAILED_LOGIN)).select("*", user_id(line).alias("user"))
            .select("*", skipped.alias("reason")).select(dead_letter(reason).alias("dead_letter")))


# Made once, not for each batch: each Column made in Python is a call into
# the JVM (as in the aggregator's topology).
@functools.cache
def _line_columns(window_seconds: int) -> tuple[Column, list[Column]]:
    line = F.col("value").cast("string")
    user = user_id(line)
    millis = F.unix_millis("timestamp")
    on_time = plausible_millis(millis)
    return line.contains(FAILED_LOGIN), [
        F.when(storable_key(user) & on_time, user).otherwise(NO_USER).alias("user"),
        F.when(on_time, window_start(millis, window_seconds)).alias("window_start")]


# What a (user, window) count is taken to hold in Python besides its user id's
# bytes (a Row, a dict entry, their numbers); an estimate, which
# __main__.PART_BYTES allows for.
ROW_OVERHEAD_BYTES = 200
# The most a count can take, its user id the longest kept.
MAX_COUNT_BYTES = MAX_KEY_BYTES + ROW_OVERHEAD_BYTES


class Summary(NamedTuple):
    """A batch's counts summed up: `users` (the (user, window) counts to
    store), `user_bytes` (what they take in Python, about), `failed_logins`,
    and the lines skipped with no usable user (`no_user`) or time (`bad_time`)."""

    users: int
    failed_logins: int
    user_bytes: int
    no_user: int
    bad_time: int


def summary(counts: DataFrame) -> Summary:
    """The Summary of a batch's counts, summed up by Spark (one job)."""
    row = counts.agg(*_summary_columns()).first()
    assert row is not None  # an aggregate: one row
    return Summary(**row.asDict())


@functools.cache
def _summary_columns() -> list[Column]:
    is_user = F.col("user") != NO_USER

    def total(condition: Column, value: Column | None = None) -> Column:  # of the counts, unless `value` says
        return F.coalesce(F.sum(F.when(condition, F.col("count") if value is None else value)), F.lit(0))

    return [
        F.count_if(is_user).alias("users"),
        total(is_user).alias("failed_logins"),
        total(is_user, F.octet_length("user") + ROW_OVERHEAD_BYTES).alias("user_bytes"),
        total(~is_user & F.col("window_start").isNotNull()).alias("no_user"),
        total(~is_user & F.col("window_start").isNull()).alias("bad_time"),
    ]


def small_batch_counts(lines: DataFrame, window_seconds: int) -> DataFrame:
    """failed_logins of a batch of lines known to be small, made by one task
    in one stage: read and counted with no shuffle. Spread over the cores,
    the same took three stages and two shuffles, twice as long for a
    thousand lines. Collected whole and summed up in Python (summed_up):
    summing them up in Spark too, in the same job, took a third longer."""
    return failed_logins(lines.coalesce(1), window_seconds)


def summed_up(rows: Iterable[Row]) -> tuple[dict[tuple[str, int], int], Summary]:
    """A small batch's counts as collected (small_batch_counts) -> its
    users' counts, {(user, window_start): count}, and the Summary that
    `summary` makes of the same counts."""
    users: dict[tuple[str, int], int] = {}
    no_user = bad_time = 0
    for row in rows:
        if row.user != NO_USER:
            users[(row.user, row.window_start)] = row["count"]
        elif row.window_start is None:
            bad_time += row["count"]
        else:
            no_user += row["count"]
    return users, Summary(users=len(users), failed_logins=sum(users.values()),
                          user_bytes=sum(len(user.encode()) + ROW_OVERHEAD_BYTES for user, _ in users),
                          no_user=no_user, bad_time=bad_time)


def counts_part(counts: DataFrame, parts: int, part: int) -> DataFrame:
    """The users' counts in one of `parts` parts, so Python holds a part at a
    time however many distinct users a batch has."""
    return counts.where((F.col("user") != NO_USER) & in_part(parts, part, "user", "window_start"))
