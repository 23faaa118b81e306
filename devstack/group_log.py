"""`python -m devstack.group_log <file> <module>`: runs `python -m <module>`
with kafka-python's group coordination (joins, assignments, revocations,
at INFO) logged to <file>.

kafka-python logs nothing by itself (its logger has a NullHandler), and the
worker's own lines say only what the group gave it. A test's copy that
waits for its partitions is explained by these lines: the join it sent and
the answer it did or did not get. Dev only: the slug runs the module
itself."""

import logging
import runpy
import sys

path, module = sys.argv[1], sys.argv[2]
handler = logging.FileHandler(path)
handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(message)s"))
coordinator = logging.getLogger("kafka.coordinator")
coordinator.setLevel(logging.INFO)
coordinator.addHandler(handler)
sys.argv[1:] = sys.argv[3:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
