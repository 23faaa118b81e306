"""loglines -> failed logins per (user, window) of one micro-batch, in Spark SQL.

A line is a failed login when it contains `login failed`. Its user id is its
first `|`-separated field, trimmed, with a leading `user_id:` label removed
(`user_id: alice | timestamp: ... | action: login failed` is `alice`; so is
`alice|...`). Event time is the line's Kafka timestamp; windows are tumbling
and aligned to the epoch, as the aggregator's.

Failed logins without a user id, or with one Postgres cannot keep as a key
(shared.events.storable_key), are counted under the user "" so that one
aggregation gives both the counts and how many lines were skipped.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.events import storable_key, window_start

FAILED_LOGIN = "login failed"
NO_USER = ""


def user_id(line):
    first_field = F.split(line, r"\|", 2)[0]
    unlabelled = F.regexp_replace(first_field, r"(?U)^\s*user_id\s*:", "")
    return F.regexp_replace(unlabelled, r"(?U)^\s+|\s+$", "")


def failed_logins(lines: DataFrame, window_seconds: int) -> DataFrame:
    """Columns: user (NO_USER for lines without one), window_start (epoch s), count."""
    line = F.col("value").cast("string")
    user = user_id(line)
    return (
        lines.where(line.contains(FAILED_LOGIN))
        .select(F.when(storable_key(user), user).otherwise(NO_USER).alias("user"),
                window_start(F.col("timestamp"), window_seconds).alias("window_start"))
        .groupBy("user", "window_start")
        .count()
    )
