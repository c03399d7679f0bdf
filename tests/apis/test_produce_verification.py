"""KIP-890 transaction verification on Produce (transaction.partition.verification.enable): a
producer's first transactional batch in a partition is appended only when its coordinator says
the partition is in the ongoing transaction, and only if no marker ended that transaction while
the coordinator was being asked; the later batches of the transaction are not verified again."""

from __future__ import annotations

import pytest

from gregor.protocol import record_batch as rb
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch
from tests.support.transactions import init_producer, transactional_node

TID = "verified"


def txn_batch(pid: int, epoch: int, seq: int) -> bytes:
    return build_batch([(None, b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       attributes=rb.TRANSACTIONAL_BIT)


def produce(node, partition: int, batch: bytes, tid: str | None = TID) -> tuple[ErrorCode, str | None]:
    resp = node.call(ApiKey.PRODUCE, 9, {"transactional_id": tid, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": partition, "records": batch}]}]})
    p = resp.responses[0].partition_responses[0]
    return ErrorCode(p.error_code), p.error_message


@pytest.fixture
def node(in_process_broker_factory):
    with transactional_node(in_process_broker_factory) as node:
        yield node


def init(node) -> tuple[int, int]:
    return init_producer(node, TID, 4)


def add(node, pid: int, epoch: int, partition: int) -> None:
    resp = node.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": TID, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [partition]}]})
    assert resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0


def test_a_batch_for_a_partition_outside_the_transaction_is_refused(node):
    pid, epoch = init(node)
    add(node, pid, epoch, 0)
    assert produce(node, 0, txn_batch(pid, epoch, 0))[0] == ErrorCode.none
    code, message = produce(node, 1, txn_batch(pid, epoch, 0))
    assert code == ErrorCode.invalid_txn_state, message
    assert node.services.logs.get("t", 1).log_end_offset == 0
    # the ongoing transaction's later batches go through without asking again
    asked = []
    original = node.services.transactions.verify

    async def counting(*a, **kw):
        asked.append(a)
        return await original(*a, **kw)

    node.services.transactions.verify = counting
    assert produce(node, 0, txn_batch(pid, epoch, 1))[0] == ErrorCode.none
    assert asked == []


def test_a_stale_epoch_is_answered_as_produce_v11_clients_expect(node):
    pid, epoch = init(node)
    add(node, pid, epoch, 0)
    code, _ = produce(node, 0, txn_batch(pid, epoch + 5, 0))
    assert code in (ErrorCode.invalid_producer_epoch, ErrorCode.invalid_txn_state)
    code, _ = produce(node, 0, txn_batch(pid + 1000, 0, 0))  # a producer id the coordinator never gave
    assert code != ErrorCode.none
    assert node.services.logs.get("t", 0).log_end_offset == 0


def test_a_marker_written_while_the_coordinator_is_asked_voids_the_verification(node):
    """The coordinator confirms the partition, but the transaction ends (its marker is appended)
    before the answer arrives: the late batch must not open a transaction nobody will end."""
    pid, epoch = init(node)
    add(node, pid, epoch, 0)
    original = node.services.transactions.verify

    async def slow_answer(tid, producer_id, producer_epoch, partitions, add=False):
        answer = await original(tid, producer_id, producer_epoch, partitions, add)
        await node.services.replicas.write_txn_marker("t", 0, producer_id, producer_epoch, 0, False, 5)
        return answer

    node.services.transactions.verify = slow_answer
    code, _ = produce(node, 0, txn_batch(pid, epoch, 0))
    assert code == ErrorCode.invalid_txn_state
    plog = node.services.logs.get("t", 0)
    assert plog.producer_state.ongoing == {}
    assert plog.last_stable_offset == plog.high_watermark


def test_verification_can_be_turned_off(in_process_broker_factory):
    node = in_process_broker_factory({"transaction.partition.verification.enable": "false"})
    node.services.topics.create_topic("t", 1, {})
    # no coordinator knows this producer: without verification the batch is appended (Kafka < 3.6)
    assert produce(node, 0, txn_batch(77, 0, 0))[0] == ErrorCode.none


# -- TxnOffsetCommit ------------------------------------------------------------------------------
def txn_offset_commit(node, pid: int, epoch: int, group: str = "g") -> ErrorCode:
    resp = node.call(ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": TID, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                  "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return ErrorCode(resp.topics[0].partitions[0].error_code)


def add_offsets(node, pid: int, epoch: int, group: str = "g") -> None:
    resp = node.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": TID, "producer_id": pid,
                                                    "producer_epoch": epoch, "group_id": group})
    assert resp.error_code == ErrorCode.none, resp


def pending(node, group: str = "g") -> dict:
    partition = node.services.groups.partition_for(group)
    shard = node.services.groups.active_shard(partition)
    return {pid: by for pid, by in shard.offsets_mgr.pending.items() if by.get(group)}


def test_offsets_of_a_transaction_without_the_groups_partition_are_refused(node):
    pid, epoch = init(node)
    add(node, pid, epoch, 0)
    assert txn_offset_commit(node, pid, epoch) == ErrorCode.invalid_txn_state
    assert pending(node) == {}
    add_offsets(node, pid, epoch)
    assert txn_offset_commit(node, pid, epoch) == ErrorCode.none
    assert list(pending(node)) == [pid]


def test_a_marker_written_while_the_coordinator_is_asked_voids_the_offsets_verification(node):
    """Pending offsets of a transaction that already ended would make every stable OffsetFetch of
    the partition answer UNSTABLE_OFFSET_COMMIT for good: the late write is refused instead."""
    pid, epoch = init(node)
    add_offsets(node, pid, epoch)
    original = node.services.transactions.verify
    partition = node.services.groups.partition_for("g")

    async def slow_answer(tid, producer_id, producer_epoch, partitions, add=False):
        answer = await original(tid, producer_id, producer_epoch, partitions, add)
        await node.services.groups.complete_transaction(partition, producer_id, producer_epoch, 0, False)
        return answer

    node.services.transactions.verify = slow_answer
    assert txn_offset_commit(node, pid, epoch) == ErrorCode.invalid_txn_state
    assert pending(node) == {}
    plog = node.services.logs.get("__consumer_offsets", partition)
    assert plog.producer_state.ongoing == {}


def test_an_unreadable_batch_with_a_transactional_id_is_refused_like_any_other(node):
    """A batch whose header cannot be read (bad magic, bad length) in a request with a
    transactional id gets the append's CORRUPT_MESSAGE, not a closed connection (found by the
    live fuzzer: the verification read the header before the append could refuse it)."""
    pid, epoch = init(node)
    add(node, pid, epoch, 0)
    bad_magic = bytearray(txn_batch(pid, epoch, 0))
    bad_magic[rb.MAGIC] = 7
    code, _ = produce(node, 0, bytes(bad_magic))
    assert code == ErrorCode.corrupt_message
    bad_length = bytearray(txn_batch(pid, epoch, 0))
    bad_length[rb.LENGTH:rb.LENGTH + 4] = (10_000).to_bytes(4, "big")
    code, _ = produce(node, 0, bytes(bad_length))
    assert code == ErrorCode.corrupt_message
    assert node.services.logs.get("t", 0).log_end_offset == 0


def test_transactional_batches_without_a_transactional_id_are_refused(node):
    """Kafka's hasTransactionalRecords check: without the id nobody could end the transaction the
    batch would open (read_committed readers would stall behind it)."""
    pid, epoch = init(node)
    code, message = produce(node, 0, txn_batch(pid, epoch, 0), tid=None)
    assert code == ErrorCode.transactional_id_authorization_failed, message
    plog = node.services.logs.get("t", 0)
    assert plog.log_end_offset == 0 and plog.producer_state.ongoing == {}
