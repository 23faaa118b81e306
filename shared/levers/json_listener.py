"""The json_listener lever: Spark's batch reports cross Py4J as one JSON
string each, not field by field. Off, PySpark's own listener adapter reads
them (docs/decisions/py4j.md)."""

import json

from py4j.java_gateway import JavaObject
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import QueryProgressEvent, QueryTerminatedEvent


class JsonReports:
    """The listener Spark calls through Py4J, for a BatchListener: each
    report crosses from the JVM as its JSON, in one call, and becomes
    PySpark's own event as Spark Connect builds it (`fromJson`). PySpark's
    adapter read every field with a call of its own, and each Java map it
    read ended in an exception that PySpark converts with a dozen more
    calls, for every micro-batch's report (docs/decisions/py4j.md)."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, event: JavaObject) -> None:
        pass

    def onQueryIdle(self, event: JavaObject) -> None:
        pass

    def onQueryProgress(self, event: JavaObject) -> None:
        self.listener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(event.json())))

    def onQueryTerminated(self, event: JavaObject) -> None:
        self.listener.onQueryTerminated(QueryTerminatedEvent.fromJson(json.loads(event.json())))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
