"""Dev tools, never on a dyno (`.slugignore` leaves this folder out): the
local broker and Postgres, Heroku-like certificates, worker processes with
their log lines, and reading Kafka and Postgres from tests and benchmarks."""
