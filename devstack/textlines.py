"""Stream lines of text to `textlines`: those of a file, or made-up sentences.

    python -m devstack.textlines [--file F] [--rate N] [--count N]
"""

import random
from collections.abc import Iterator

from devstack.generator import arguments, stream

VOCABULARY = (
    "the quick brown fox jumps over lazy dog stream spark kafka heroku dyno "
    "window count word line event time late early alert log user failed login "
    "café naïve über straße東京 привет мир ΟΔΟΣ data flows through topics every second"
).split()


def made_up_sentences(seed: int | None = None) -> Iterator[bytes]:
    rng = random.Random(seed)
    while True:
        words = rng.choices(VOCABULARY, k=rng.randint(6, 18))
        yield (" ".join(words).capitalize() + rng.choice(".!?")).encode()


def file_lines(path: str) -> Iterator[bytes]:
    with open(path, "rb") as text:
        for line in text:
            yield line.rstrip(b"\r\n")


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--file", help="a text file to stream, once (default: made-up sentences)")
    args = parser.parse_args(argv)
    lines = file_lines(args.file) if args.file else made_up_sentences()
    stream("textlines", lines, args.rate, args.count)


if __name__ == "__main__":
    main()
