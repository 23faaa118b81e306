"""Stream log lines in the original example's format to `loglines`.

    python -m devstack.loglines [--rate N] [--count N]
        [--failure-probability P] [--users N | --user NAME ...]

user_id: alice | timestamp: 2026-11-20T10:00:00Z | ip_address: 10.0.3.7 | action: login failed | message: ...
"""

import datetime
import random
from collections.abc import Iterator

from devstack.generator import arguments, stream

ACTIONS = ("login succeeded", "logout", "password changed", "page viewed")


def log_lines(users: list[str], failure_probability: float, seed: int | None = None) -> Iterator[bytes]:
    rng = random.Random(seed)
    while True:
        failed = rng.random() < failure_probability
        action = "login failed" if failed else rng.choice(ACTIONS)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        message = "invalid password" if failed else "ok"
        yield (f"user_id: {rng.choice(users)} | timestamp: {now} | ip_address: {ip} | "
               f"action: {action} | message: {message}").encode()


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--failure-probability", type=float, default=0.05)
    parser.add_argument("--users", type=int, default=100, help="users user1..userN (default 100)")
    parser.add_argument("--user", action="append", help="a user name; repeat for several")
    args = parser.parse_args(argv)
    users = args.user or [f"user{n}" for n in range(1, args.users + 1)]
    stream("loglines", log_lines(users, args.failure_probability), args.rate, args.count)


if __name__ == "__main__":
    main()
