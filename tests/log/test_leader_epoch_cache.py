"""LeaderEpochCache: Kafka 2.8's LeaderEpochFileCache semantics (assignment, KIP-279 end offsets,
truncation from either end) and the ``leader-epoch-checkpoint`` file (Kafka's format, atomic)."""

import pytest

from gregor.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    CorruptEpochCheckpoint,
    LeaderEpochCache,
    read_epoch_checkpoint,
)


@pytest.fixture
def path(tmp_path):
    return tmp_path / LEADER_EPOCH_CHECKPOINT


def cache_of(path, *entries):
    c = LeaderEpochCache(path)
    for e, s in entries:
        c.assign(e, s)
    return c


def test_empty_cache(path):
    c = LeaderEpochCache(path)
    assert c.latest_epoch == -1 and len(c) == 0 and c.latest_entry() is None
    assert c.end_offset_for(0, 10) == (-1, -1)
    assert c.end_offset_for(-1, 10) == (-1, -1)
    assert c.epoch_for_offset(5) == -1
    assert not path.exists()  # nothing written until something changes


def test_assign_appends_new_epochs_and_ignores_the_latest_again(path):
    c = LeaderEpochCache(path)
    assert c.assign(0, 0)
    assert c.assign(2, 10)
    assert not c.assign(2, 15)  # the latest epoch at a later offset: nothing changes
    assert not c.assign(2, 10)
    assert c.assign(5, 20)
    assert c.entries == [(0, 0), (2, 10), (5, 20)] and c.latest_epoch == 5
    assert c.latest_entry() == (5, 20) and c.earliest_entry() == (0, 0)


def test_a_conflicting_assignment_wins_over_the_entries_it_contradicts(path):
    # Kafka 2.8 (maybeTruncateNonMonotonicEntries): entries at the end with an epoch >= the new
    # one or a start >= the new start are removed, then the new entry is appended
    c = cache_of(path, (0, 0), (2, 10), (5, 20))
    assert c.assign(3, 15)  # an older epoch than the latest
    assert c.entries == [(0, 0), (2, 10), (3, 15)]
    assert c.assign(6, 12)  # a newer epoch starting below the latest start
    assert c.entries == [(0, 0), (2, 10), (6, 12)]
    assert c.assign(6, 11)  # the latest epoch again, at a lower offset
    assert c.entries == [(0, 0), (2, 10), (6, 11)]
    assert read_epoch_checkpoint(path) == c.entries  # removals are written at once


def test_assign_refuses_negative_values(path):
    c = LeaderEpochCache(path)
    with pytest.raises(ValueError):
        c.assign(-1, 0)
    with pytest.raises(ValueError):
        c.assign(0, -5)


def test_end_offset_for_follows_kip_279(path):
    c = cache_of(path, (1, 0), (3, 10), (6, 25))
    leo = 40
    assert c.end_offset_for(6, leo) == (6, 40)  # the latest epoch ends at the log end
    assert c.end_offset_for(3, leo) == (3, 25)  # ends where the next epoch starts
    assert c.end_offset_for(1, leo) == (1, 10)
    # an epoch this log never had: the largest one below it, ending where the next one starts
    assert c.end_offset_for(4, leo) == (3, 25)
    assert c.end_offset_for(5, leo) == (3, 25)
    assert c.end_offset_for(2, leo) == (1, 10)
    # below the first epoch (that history was removed here): the requested epoch, ending at the
    # first epoch's start (Kafka 2.8's LeaderEpochFileCache.endOffsetFor)
    assert c.end_offset_for(0, leo) == (0, 0)
    # unknown: above the latest epoch, or undefined
    assert c.end_offset_for(7, leo) == (-1, -1)
    assert c.end_offset_for(-1, leo) == (-1, -1)


def test_epoch_for_offset(path):
    c = cache_of(path, (1, 5), (3, 10), (6, 25))
    assert c.epoch_for_offset(4) == -1
    assert [c.epoch_for_offset(o) for o in (5, 9, 10, 24, 25, 1000)] == [1, 1, 3, 3, 6, 6]


def test_truncate_from_end(path):
    c = cache_of(path, (1, 0), (3, 10), (6, 25))
    assert not c.truncate_from_end(26)  # nothing starts at or after 26
    assert c.truncate_from_end(25)
    assert c.entries == [(1, 0), (3, 10)] and c.latest_epoch == 3
    assert c.truncate_from_end(3)
    assert c.entries == [(1, 0)]
    assert read_epoch_checkpoint(path) == [(1, 0)]
    assert c.truncate_from_end(0)
    assert c.entries == [] and c.latest_epoch == -1
    assert read_epoch_checkpoint(path) == []


def test_truncate_from_start(path):
    c = cache_of(path, (1, 0), (3, 10), (6, 25))
    assert not c.truncate_from_start(0)  # already starts there
    assert c.truncate_from_start(12)  # the last entry below moves up to the new start
    assert c.entries == [(3, 12), (6, 25)]
    assert read_epoch_checkpoint(path) == [(3, 12), (6, 25)]
    assert c.truncate_from_start(25)  # exactly at an entry: that one stays, the ones below go
    assert c.entries == [(6, 25)]
    assert c.truncate_from_start(100)  # past every entry: the last one is kept, moved up
    assert c.entries == [(6, 100)] and c.latest_epoch == 6

    d = cache_of(path, (4, 50))
    assert not d.truncate_from_start(20)  # below the first entry: nothing to drop
    assert d.entries == [(4, 50)]


def test_checkpoint_file_is_kafkas_format(path):
    cache_of(path, (0, 0), (3, 150), (4, 1500))
    assert path.read_text() == "0\n3\n0 0\n3 150\n4 1500\n"
    assert not list(path.parent.glob(path.name + ".*tmp"))
    LeaderEpochCache(path).clear()
    assert path.read_text() == "0\n0\n"


def test_round_trip(path):
    c = cache_of(path, (0, 0), (3, 150), (4, 1500))
    again = LeaderEpochCache.load(path)
    assert again is not None and again.entries == c.entries and again.latest_epoch == 4
    assert not again.dirty
    # a file written by Kafka (whitespace-separated) reads the same
    path.write_text("0\n2\n0  0\n7\t99\n")
    kafka = LeaderEpochCache.load(path)
    assert kafka is not None and kafka.entries == [(0, 0), (7, 99)]


def test_deferred_assignment_is_written_at_flush(path):
    c = LeaderEpochCache(path)
    c.assign(0, 0, durable=False)
    assert not path.exists() and c.dirty
    c.flush()
    assert read_epoch_checkpoint(path) == [(0, 0)] and not c.dirty
    c.assign(2, 30, durable=False)
    assert read_epoch_checkpoint(path) == [(0, 0)]
    c.flush()
    assert read_epoch_checkpoint(path) == [(0, 0), (2, 30)]
    c.assign(1, 10, durable=False)  # removes (2, 30): written at once despite durable=False
    assert read_epoch_checkpoint(path) == [(0, 0), (1, 10)] and not c.dirty


@pytest.mark.parametrize("text", [
    "1\n1\n0 0\n",           # unknown version
    "0\n2\n0 0\n",           # fewer entries than counted
    "0\n1\n0 0\n1 5\n",      # more entries than counted
    "0\n1\nzero 0\n",        # not a number
    "0\n1\n0 0 0\n",         # three fields
    "0\n2\n3 10\n2 20\n",    # epochs going down
    "0\n2\n1 10\n2 5\n",     # start offsets going down
    "0\n",                   # no count
    "",
])
def test_corrupt_files_are_detected(path, text):
    path.write_text(text)
    with pytest.raises(CorruptEpochCheckpoint):
        read_epoch_checkpoint(path)
    assert LeaderEpochCache.load(path) is None


def test_missing_file_loads_as_none(path):
    assert read_epoch_checkpoint(path) is None
    assert LeaderEpochCache.load(path) is None


def test_a_failed_write_keeps_the_cache_dirty_for_the_next_flush(tmp_path):
    c = LeaderEpochCache(tmp_path / "missing-dir" / LEADER_EPOCH_CHECKPOINT)
    with pytest.raises(OSError):
        c.assign(0, 0)
    assert c.entries == [(0, 0)] and c.dirty
    (tmp_path / "missing-dir").mkdir()
    c.flush()
    assert not c.dirty and read_epoch_checkpoint(c.path) == [(0, 0)]
