import threading

import pytest

from shared.parts import one_ahead


def test_the_next_part_is_made_while_the_caller_uses_this_one():
    second_made = threading.Event()

    def parts():
        for n in range(3):
            if n == 1:
                second_made.set()
            yield f"part {n}"

    used = []
    for part in one_ahead(parts()):
        if not used:
            assert second_made.wait(5), "the second part was not made while the first was used"
        used.append(part)
    assert used == ["part 0", "part 1", "part 2"]


def test_a_part_that_could_not_be_made_fails_its_caller():
    def parts():
        yield "part 0"
        raise RuntimeError("the part's Spark job failed")

    with pytest.raises(RuntimeError, match="Spark job failed"):
        list(one_ahead(parts()))
