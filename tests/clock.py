"""The tests' event times: recent, never a fixed date. Records older than
the broker's retention (7 days on the local broker, 1 to 14 on Heroku's) are
deleted under a running test, and windows older than RETENTION_HOURS (7 days
by default) by the workers' own retention: a fixed date in the tests stops
passing a week after it was written."""

import time

# An epoch second that begins a minute (and so a 10 s window), two hours
# before this test process started: old enough for a test that wants a
# window past a retention of 1 hour, recent enough for every other.
# Each test process reads the clock as it imports this module, so two xdist
# workers may hold different values: a test's parameters (whose ids every
# worker must collect alike) never take it.
T0 = int(time.time()) // 60 * 60 - 2 * 3600
T0_MS = T0 * 1000
