"""One `key=value` line per event on stdout, the Heroku way."""

import sys

from shared.config import DYNO


def log(event: str, **fields: object) -> None:
    pairs = {"event": event, "dyno": DYNO, **fields}
    print(" ".join(f"{key}={_value(value)}" for key, value in pairs.items()),
          file=sys.stdout, flush=True)


def _value(value: object) -> str:
    if isinstance(value, float):
        value = round(value, 3)
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text
