import asyncio

from gregor.log.cleaner import clean_partition
from gregor.protocol import compression
from gregor.protocol.records import build_batch
from tests.support.partition_logs import read_all


def test_compaction_keeps_latest_per_key_and_offsets(make_log, clock):
    plog = make_log(**{"cleanup.policy": "compact", "segment.bytes": 600, "delete.retention.ms": 0})
    expected = {}
    for i in range(60):
        key = b"k%d" % (i % 5)
        value = None if i == 57 else b"v%d" % i  # one tombstone for k2
        plog.append(build_batch([(key, value)], timestamp=clock.now, codec=compression.GZIP if i % 2 else 0))
        expected[key] = (plog.log_end_offset - 1, value)
    plog.roll()
    plog.append(build_batch([(b"z", b"active")], timestamp=clock.now))
    clock.now += 10_000
    before = plog.size_bytes
    saved = asyncio.run(clean_partition(plog))
    assert saved > 0 and plog.size_bytes < before
    recs = read_all(plog)
    latest = {r.key: (r.offset, r.value) for r in recs}
    for key, (off, value) in expected.items():
        if value is None:
            assert key not in latest  # tombstone past delete.retention.ms removed
        else:
            assert latest[key] == (off, value)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(offsets)
    assert plog.log_end_offset == 61
    assert plog.append(build_batch([(b"k0", b"new")])).base_offset == 61
