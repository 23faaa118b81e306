"""One `key=value` line per event on stdout, the Heroku way."""

import os
import sys
import threading

# Heroku names each dyno (aggregator_worker.2); every log line carries it.
DYNO = os.environ.get("DYNO", "local")

# Threads log at once (a batch's line, an alert's, a retention's). `print`
# writes a line and its newline in two calls, between which another thread's
# line could come: two events on one line, which no log reader would parse.
_WRITING = threading.Lock()


def log(event: str, **fields: object) -> None:
    pairs = {"event": event, "dyno": DYNO, **fields}
    line = " ".join(f"{key}={_value(value)}" for key, value in pairs.items()) + "\n"
    with _WRITING:
        sys.stdout.write(line)
        sys.stdout.flush()


def _value(value: object) -> str:
    if isinstance(value, float):
        value = round(value, 3)
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text
