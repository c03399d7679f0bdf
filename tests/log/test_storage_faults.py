"""Storage failures in the log layer: a failed append leaves the segment exactly as before, a
failed rollback takes the partition offline, corrupt batches are reported (never skipped), the
descriptor cache stays bounded, partitions load lazily after a clean shutdown, and topic deletion
finishes whatever step a crash interrupted. The full-disk behaviour against a real broker and a
real full file system is in tests/integration/test_storage_faults.py."""

import errno
import os

import pytest

from gregor.config import BrokerConfig
from gregor.log import segment as segment_mod
from gregor.log.log_manager import LogManager
from gregor.log.storage_errors import FD_CACHE, FdCache, PartitionOffline, StorageError
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import build_batch, decode_records, iter_batches


def batch(n=1, size=100, key=b"k"):
    return build_batch([(key, b"x" * size)] * n, timestamp=1_700_000_000_000)


def values(plog):
    out = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).records
        assert data
        for h in iter_batches(data):
            out += [(r.offset, r.value) for r in decode_records(data, h) if r.offset >= offset]
            offset = h.next_offset
    return out


@pytest.fixture
def short_write_then_enospc(monkeypatch):
    """os.writev writes part of the data and the next write fails with ENOSPC, as a filling disk does."""
    real_writev = os.writev
    state = {"armed": 0}

    def writev(fd, buffers):
        if not state["armed"]:
            return real_writev(fd, buffers)
        state["armed"] -= 1
        data = b"".join(bytes(b) for b in buffers)
        return os.write(fd, data[: len(data) // 2])

    def write(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_mod.os, "writev", writev)
    real_write = os.write

    class Arm:
        def __call__(self, n=1):
            state["armed"] = n
            monkeypatch.setattr(segment_mod.os, "write", write)

        def disarm(self):
            state["armed"] = 0
            monkeypatch.setattr(segment_mod.os, "write", real_write)

    return Arm()


def test_failed_append_is_rolled_back(make_log, short_write_then_enospc):
    plog = make_log()
    for _ in range(3):
        plog.append(batch())
    seg = plog.active
    size, leo, entries = seg.size, plog.log_end_offset, len(seg.index)
    short_write_then_enospc()
    with pytest.raises(StorageError) as e:
        plog.append(batch(2))
    assert e.value.code == ErrorCode.kafka_storage_error
    assert os.path.getsize(seg.path) == size == seg.size  # the half-written bytes are gone
    assert plog.log_end_offset == leo and len(seg.index) == entries
    short_write_then_enospc.disarm()
    res = plog.append(batch(2, key=b"after"))
    assert res.base_offset == leo
    got = values(plog)
    assert [o for o, _ in got] == list(range(leo + 2))
    # and after a crash (no clean shutdown) recovery keeps every batch: nothing torn in between
    plog.close_files()
    again = make_log(clean=False, recovery_point=0)
    assert again.log_end_offset == leo + 2
    assert values(again) == got


def test_failed_rollback_takes_the_partition_offline(make_log, short_write_then_enospc, monkeypatch):
    plog = make_log()
    plog.append(batch())
    short_write_then_enospc()

    def no_truncate(fd, length):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segment_mod.os, "ftruncate", no_truncate)
    with pytest.raises(PartitionOffline):
        plog.append(batch())
    short_write_then_enospc.disarm()
    for call in (lambda: plog.append(batch()), lambda: plog.read(0, 1000)):
        with pytest.raises(KafkaError) as e:
            call()
        assert e.value.code == ErrorCode.kafka_storage_error


def test_failed_fsync_takes_the_partition_offline(make_log, monkeypatch):
    plog = make_log()
    plog.append(batch())

    def bad_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segment_mod.os, "fsync", bad_fsync)
    with pytest.raises(PartitionOffline):
        plog.flush()
    assert plog.offline


def test_roll_failing_keeps_the_active_segment(make_log, monkeypatch):
    plog = make_log(**{"segment.bytes": 300})
    plog.append(batch())
    plog.append(batch())
    real_open = os.open

    def no_create(path, flags, mode=0o777):
        if flags & os.O_CREAT and str(path).endswith(".log") and not os.path.exists(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, mode)

    monkeypatch.setattr(segment_mod.os, "open", no_create)
    segments = list(plog.segments)
    with pytest.raises(StorageError):
        plog.append(batch())
    assert plog.segments == segments and plog.log_end_offset == 2
    monkeypatch.setattr(segment_mod.os, "open", real_open)
    assert plog.append(batch()).base_offset == 2
    assert [o for o, _ in values(plog)] == [0, 1, 2]


def test_corrupt_header_mid_segment_is_reported_not_skipped(make_log, caplog):
    plog = make_log(**{"segment.bytes": 1 << 20})
    for _ in range(10):
        plog.append(batch())
    plog.roll()
    for _ in range(5):
        plog.append(batch())
    seg = plog.segments[0]
    h = list(seg.iter_headers())[4]  # offset 4
    with open(seg.path, "r+b") as f:  # zero the batch length: its header can no longer be walked
        f.seek(h.position + 8)
        f.write(b"\0\0\0\0")
    assert [o for o, _ in _read_until_error(plog, 0)] == [0, 1, 2, 3]
    with pytest.raises(KafkaError) as e:
        plog.read(4, 1 << 20)
    assert e.value.code == ErrorCode.corrupt_message
    assert "corrupt record batch at position" in caplog.text
    # a clean restart does not change that (the clean start checks only the last batch)
    plog.close()
    again = make_log(clean=True)
    with pytest.raises(KafkaError) as e:
        again.read(4, 1 << 20)
    assert e.value.code == ErrorCode.corrupt_message


def test_crc_damage_is_served_as_stored(make_log):
    plog = make_log()
    for _ in range(5):
        plog.append(batch())
    seg = plog.active
    h = list(seg.iter_headers())[2]
    with open(seg.path, "r+b") as f:  # flip a byte of the records and the magic: CRC-covered / checked by clients
        f.seek(h.position + h.size - 3)
        f.write(b"\xff")
        f.seek(h.position + 16)
        f.write(b"\x07")
    data = plog.read(2, 1 << 20).records
    with open(seg.path, "rb") as f:
        f.seek(h.position)
        assert data.startswith(f.read(h.size))  # the damaged batch, byte for byte


def _read_until_error(plog, offset):
    out = []
    while True:
        try:
            data = plog.read(offset, 1 << 20).records
        except KafkaError:
            return out
        if not data:
            return out
        for h in iter_batches(data):
            out += [(r.offset, r.value) for r in decode_records(data, h) if r.offset >= offset]
            offset = h.next_offset


def test_fd_cache_is_bounded_and_pins(tmp_path):
    cache = FdCache(2)

    class Owner:
        def __init__(self, p):
            self.p = p

        def open_fd(self):
            return os.open(self.p, os.O_RDONLY | os.O_CREAT)

    owners = [Owner(tmp_path / f"f{i}") for i in range(5)]
    pinned = cache.acquire(owners[0])
    for o in owners[1:]:
        cache.acquire(o)
        cache.release(o)
    assert len(cache) == 2
    os.fstat(pinned)  # the pinned descriptor was never closed
    cache.drop(owners[0])  # dropped while pinned: closed at the last release
    os.fstat(pinned)
    cache.release(owners[0])
    with pytest.raises(OSError):
        os.fstat(pinned)


def test_many_segments_stay_within_the_fd_cache(make_log):
    old = FD_CACHE.capacity
    FD_CACHE.capacity = 16
    try:
        plog = make_log(**{"segment.bytes": 200})
        for _ in range(60):
            plog.append(batch())
        assert len(plog.segments) >= 50
        assert len(FD_CACHE) <= 16
        assert [o for o, _ in values(plog)] == list(range(60))
        assert len(FD_CACHE) <= 16
    finally:
        FD_CACHE.capacity = old


def _manager(data_dir):
    cfg = BrokerConfig.from_mapping({"log.dirs": str(data_dir)})
    lm = LogManager(data_dir, cfg.topic_defaults(), TopicRegistry(data_dir))
    lm.startup()
    return lm


def test_partitions_load_lazily_after_a_clean_shutdown(tmp_path):
    lm = _manager(tmp_path)
    topic = lm.registry.new_topic("t", 3, {})
    logs = lm.build_logs(topic)
    lm.registry.add_topic(topic)
    lm.register(logs)
    lm.get("t", 1).append(batch(3))
    lm.shutdown()
    lm = _manager(tmp_path)
    plogs = [lm.get("t", p) for p in range(3)]
    assert not any(p.loaded for p in plogs)
    assert [p.log_end_offset for p in plogs] == [0, 3, 0]
    assert [o for o, _ in values(plogs[1])] == [0, 1, 2]
    assert plogs[1].loaded and not plogs[0].loaded
    lm.shutdown()
    lm = _manager(tmp_path)
    assert lm.get("t", 1).log_end_offset == 3
    assert [o for o, _ in values(lm.get("t", 1))] == [0, 1, 2]
    lm.shutdown()


@pytest.mark.parametrize("stop_after", ["rename", "purge"])
def test_interrupted_deletion_is_finished_at_start(tmp_path, stop_after):
    lm = _manager(tmp_path)
    topic = lm.registry.new_topic("gone.topic-x", 2, {})
    logs = lm.build_logs(topic)
    lm.registry.add_topic(topic)
    lm.register(logs)
    lm.get("gone.topic-x", 0).append(batch(5))
    lm.registry.forget("gone.topic-x")
    # renamed (and emptied), registry not saved
    tombstones = lm.mark_deleted(topic, lm.delete_logs(topic), empty=stop_after == "purge")
    assert sorted(t.name for t in tombstones) == [f"gone.topic-x-{p}.{topic.topic_id.hex}-delete" for p in range(2)]
    assert bool(list(tombstones[0].iterdir())) == (stop_after == "rename")
    lm.shutdown()  # a crash would do as well: the registry on disk still names the topic
    assert "gone.topic-x" in (tmp_path / "gregor-topics.json").read_text()
    lm = _manager(tmp_path)
    assert lm.registry.get("gone.topic-x") is None
    assert "gone.topic-x" not in (tmp_path / "gregor-topics.json").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("gone.topic-x")]
    lm.shutdown()


def test_a_same_named_new_topic_is_not_taken_for_a_deleted_one(tmp_path):
    lm = _manager(tmp_path)
    old = lm.registry.new_topic("t", 1, {})
    lm.register(lm.build_logs(old))
    lm.registry.add_topic(old)
    lm.registry.forget("t")
    lm.mark_deleted(old, lm.delete_logs(old))
    lm.registry.save()
    new = lm.registry.new_topic("t", 1, {})
    lm.register(lm.build_logs(new))
    lm.registry.add_topic(new)
    lm.shutdown()  # the old tombstone is still there (crash before its removal)
    lm = _manager(tmp_path)
    assert lm.registry.get("t") is not None and lm.registry.get("t").topic_id == new.topic_id
    assert not [p for p in tmp_path.iterdir() if p.name.endswith("-delete")]
    lm.shutdown()


def test_a_wrong_index_entry_is_rebuilt_not_reported_as_corruption(make_log):
    plog = make_log(**{"index.interval.bytes": 200})
    for _ in range(20):
        plog.append(batch())
    plog.close()
    seg_index = plog.dir / "00000000000000000000.index"
    raw = bytearray(seg_index.read_bytes())
    assert len(raw) >= 24
    pos = int.from_bytes(raw[12:16], "big")
    raw[12:16] = (pos + 5).to_bytes(4, "big")  # the second entry points into a batch
    seg_index.write_bytes(bytes(raw))
    again = make_log(clean=True)
    for o in range(20):  # a consumer fetching from each offset, as after a seek
        data = again.read(o, 1).records
        h = next(iter_batches(data))
        assert h.base_offset <= o <= h.last_offset
    assert [o for o, _ in values(again)] == list(range(20))
