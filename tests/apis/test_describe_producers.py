"""DescribeProducers (apis/describe_producers.py) in process: every producer a partition has state
for, its ongoing transaction, markers' coordinator epochs, and per-partition errors."""

from __future__ import annotations

from gregor.protocol import record_batch as rb
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.control_records import build_marker_batch
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch


def txn(pid: int, seq: int, n: int = 1, epoch: int = 0, ts: int = 1000) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, attributes=rb.TRANSACTIONAL_BIT, timestamp=ts)


def describe(node, request: dict[str, list[int]]):
    resp = node.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": t, "partition_indexes": ps} for t, ps in request.items()]})
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


def rows(partition) -> list[tuple[int, int, int, int, int, int]]:
    return [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
             s.current_txn_start_offset) for s in partition.active_producers]


def test_idempotent_ongoing_and_completed_producers(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 2, {})
    plog = node.services.logs.get("t", 0)
    plog.append(build_batch([(None, b"p")], timestamp=500))                                    # 0: plain
    plog.append(build_batch([(None, b"i")] * 2, producer_id=7, producer_epoch=1, base_sequence=0,
                            timestamp=900))                                                   # 1-2: idempotent
    plog.append(txn(11, 0, n=3, epoch=2, ts=1100))                                            # 3-5: open
    plog.append(txn(12, 0, ts=1200))                                                          # 6
    plog.append_control(build_marker_batch(12, 0, 5, commit=True, timestamp=1300), 0)         # 7: 12 done
    plog.append(txn(13, 0, ts=1400))                                                          # 8: open
    got = describe(node, {"t": [0, 1]})
    p0, p1 = got[("t", 0)], got[("t", 1)]
    assert (p0.error_code, p0.error_message) == (ErrorCode.none, None)
    assert rows(p0) == [(7, 1, 1, 900, -1, -1), (11, 2, 2, 1100, -1, 3), (12, 0, 0, 1300, 5, -1),
                        (13, 0, 0, 1400, -1, 8)]
    assert (p1.error_code, rows(p1)) == (ErrorCode.none, [])


def test_an_abort_marker_closes_the_transaction(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    plog = node.services.logs.get("t", 0)
    plog.append(txn(21, 0, n=2, epoch=3))
    assert rows(describe(node, {"t": [0]})[("t", 0)]) == [(21, 3, 1, 1000, -1, 0)]
    plog.append_control(build_marker_batch(21, 3, 0, commit=False, timestamp=2000), 0)
    assert rows(describe(node, {"t": [0]})[("t", 0)]) == [(21, 3, 1, 2000, 0, -1)]
    assert plog.last_stable_offset == plog.log_end_offset == 3


def test_unknown_topics_and_partitions_answer_per_partition(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    node.services.logs.get("t", 0).append(txn(31, 0))
    got = describe(node, {"t": [0, 5], "missing": [0]})
    assert got[("t", 0)].error_code == ErrorCode.none and len(got[("t", 0)].active_producers) == 1
    for tp in (("t", 5), ("missing", 0)):
        assert got[tp].error_code == ErrorCode.unknown_topic_or_partition
        assert got[tp].error_message and tp[0] in got[tp].error_message
        assert got[tp].active_producers == ()


def test_advertised_in_api_versions(in_process_broker):
    resp = in_process_broker.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                           "client_software_version": "1"})
    assert [(k.min_version, k.max_version) for k in resp.api_keys if k.api_key == ApiKey.DESCRIBE_PRODUCERS] == [
        (0, 0)]
