"""One `key=value` line per event on stdout, the Heroku way."""

import os
import sys


def log(event, **fields):
    pairs = {"event": event, "dyno": os.environ.get("DYNO", "local"), **fields}
    print(" ".join(f"{key}={_value(value)}" for key, value in pairs.items()),
          file=sys.stdout, flush=True)


def _value(value):
    if isinstance(value, float):
        value = round(value, 3)
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text
