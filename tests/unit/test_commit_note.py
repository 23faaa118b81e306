"""The metadata each group commit carries, written by a worker and read by the web."""

from shared import commit_note


def test_a_batch_commit_reads_back_its_time_and_duration():
    assert commit_note.read(commit_note.write(1_795_000_000_123, 2_500)) == (1_795_000_000.123, 2_500)


def test_a_commit_without_a_batch_has_a_time_only():
    assert commit_note.write(1_795_000_000_000) == "at=1795000000000"
    assert commit_note.read("at=1795000000000") == (1_795_000_000.0, None)


def test_an_older_workers_bare_epoch_ms_is_a_time():
    assert commit_note.read("1795000000000") == (1_795_000_000.0, None)


def test_what_another_client_wrote_is_read_as_nothing():
    for metadata in ("", "kafka-streams", "at=soon batch_ms=-1", "batch_ms=", "=="):
        assert commit_note.read(metadata) == (None, None)
