"""Transactions V2 (KIP-890 part 2), driven with raw requests the way Kafka 4's Java producer
does once ApiVersions finalizes transaction.version=2: no AddPartitionsToTxn and no
AddOffsetsToTxn (Produce v12 and TxnOffsetCommit v5 add the partitions), and EndTxn v5 bumps the
epoch at every end and names the epoch to go on with."""

from __future__ import annotations

import asyncio

import pytest

from gregor.protocol import record_batch as rb
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch, decode_records, iter_batches
from tests.support.transactions import init_producer, transactional_node

TID = "v2-producer"


@pytest.fixture
def node(in_process_broker_factory):
    with transactional_node(in_process_broker_factory, settings={"transaction.version": "2"}) as node:
        yield node


def init(node) -> tuple[int, int]:
    return init_producer(node, TID, 5)


def produce(node, partition: int, pid: int, epoch: int, seq: int, value: bytes, version: int = 12) -> ErrorCode:
    batch = build_batch([(None, value)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        attributes=rb.TRANSACTIONAL_BIT)
    resp = node.call(ApiKey.PRODUCE, version, {"transactional_id": TID, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": partition, "records": batch}]}]})
    return ErrorCode(resp.responses[0].partition_responses[0].error_code)


def end(node, pid: int, epoch: int, commit: bool) -> tuple[ErrorCode, int, int]:
    resp = node.call(ApiKey.END_TXN, 5, {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch,
                                         "committed": commit})
    return ErrorCode(resp.error_code), resp.producer_id, resp.producer_epoch


def txn_offset_commit(node, pid: int, epoch: int, offset: int) -> ErrorCode:
    resp = node.call(ApiKey.TXN_OFFSET_COMMIT, 5, {
        "transactional_id": TID, "group_id": "g", "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "in", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return ErrorCode(resp.topics[0].partitions[0].error_code)


def committed_values(node, partition: int) -> list[bytes]:
    resp = node.call(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": "t", "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                  "fetch_offset": 0, "last_fetched_epoch": -1, "log_start_offset": -1,
                                                  "partition_max_bytes": 1 << 20}]}]})
    part = resp.responses[0].partitions[0]
    # as a Kafka consumer reads: a producer's batches from the first offset of one of its aborted
    # transactions up to its next marker are skipped
    starts = sorted((a.first_offset, a.producer_id) for a in part.aborted_transactions or ())
    skipping: set[int] = set()
    data = part.records or b""
    out: list[bytes] = []
    for h in iter_batches(data):
        while starts and starts[0][0] <= h.base_offset:
            skipping.add(starts.pop(0)[1])
        if h.is_control:
            skipping.discard(h.producer_id)
        elif h.producer_id not in skipping:
            out += [r.value for r in decode_records(data, h)]
    return out


def settled(node) -> None:
    """Until the coordinator has written the markers and completed the transaction."""
    async def wait() -> None:
        for _ in range(200):
            d = node.services.transactions.describe(TID)
            if d.state in ("CompleteCommit", "CompleteAbort", "Empty"):
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{TID} still {d.state}")
    node.run(wait())


def committed_offset(node) -> int:
    resp = node.call(ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": [{"name": "in", "partition_indexes": [0]}],
                                              "require_stable": True})
    return resp.topics[0].partitions[0].committed_offset


def test_api_versions_finalizes_transaction_version_2(node):
    resp = node.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    (feature,) = [f for f in resp.finalized_features if f.name == "transaction.version"]
    assert (feature.min_version_level, feature.max_version_level) == (2, 2)


def test_a_v2_producer_commits_and_aborts_without_adding_partitions_itself(node):
    pid, epoch = init(node)
    assert produce(node, 0, pid, epoch, 0, b"one") == ErrorCode.none
    assert produce(node, 1, pid, epoch, 0, b"two") == ErrorCode.none
    assert produce(node, 0, pid, epoch, 1, b"three") == ErrorCode.none
    assert txn_offset_commit(node, pid, epoch, 42) == ErrorCode.none
    d = node.services.transactions.describe(TID)
    assert d.state == "Ongoing" and d.topics == {"t": [0, 1], "__consumer_offsets": [d.topics["__consumer_offsets"][0]]}
    code, next_pid, next_epoch = end(node, pid, epoch, True)
    assert (code, next_pid, next_epoch) == (ErrorCode.none, pid, epoch + 1)
    settled(node)
    assert committed_values(node, 0) == [b"one", b"three"] and committed_values(node, 1) == [b"two"]
    assert committed_offset(node) == 42

    # the next transaction at the bumped epoch, sequences from 0; then aborted
    epoch = next_epoch
    assert produce(node, 0, pid, epoch, 0, b"aborted") == ErrorCode.none
    assert txn_offset_commit(node, pid, epoch, 99) == ErrorCode.none
    code, _, next_epoch = end(node, pid, epoch, False)
    assert (code, next_epoch) == (ErrorCode.none, epoch + 1)
    settled(node)
    assert committed_values(node, 0) == [b"one", b"three"]
    assert committed_offset(node) == 42

    # a batch at an epoch an end bumped past is refused (the zombie of the last transaction)
    assert produce(node, 1, pid, epoch - 1, 1, b"zombie") != ErrorCode.none
    assert committed_values(node, 1) == [b"two"]


def test_a_retried_end_gets_the_same_answer(node):
    pid, epoch = init(node)
    assert produce(node, 0, pid, epoch, 0, b"x") == ErrorCode.none
    first = end(node, pid, epoch, True)
    settled(node)
    assert end(node, pid, epoch, True) == first  # the client did not hear the first answer


def test_the_next_transaction_waits_for_the_last_ones_markers(node):
    """V2 bumps the epoch at the end, so the producer begins its next transaction at once; while
    the last one's marker is not yet in a partition (its transaction still ongoing there), a batch
    of the next one must be verified with the coordinator (busy: CONCURRENT_TRANSACTIONS), not
    slipped into the transaction that is being committed (Kafka checks the ongoing transaction's
    epoch, not only its producer id)."""
    pid, epoch = init(node)
    assert produce(node, 0, pid, epoch, 0, b"first") == ErrorCode.none
    gate = asyncio.Event()
    original = node.services.replicas.write_txn_marker

    async def held(topic, partition, *a, **kw):
        if (topic, partition) == ("t", 0):
            await gate.wait()
        return await original(topic, partition, *a, **kw)

    node.services.replicas.write_txn_marker = held
    code, _, epoch = end(node, pid, epoch, True)
    assert code == ErrorCode.none
    # the next transaction's first batch, before the commit's marker is written in partition 0
    assert produce(node, 0, pid, epoch, 0, b"next, aborted") != ErrorCode.none
    assert node.services.logs.get("t", 0).log_end_offset == 1
    gate.set()
    settled(node)
    assert produce(node, 0, pid, epoch, 0, b"next, aborted") == ErrorCode.none
    assert end(node, pid, epoch, False)[0] == ErrorCode.none
    settled(node)
    assert committed_values(node, 0) == [b"first"]


def test_a_batch_of_the_next_transaction_verified_across_the_last_ones_marker_is_appended(node):
    """The same, with the marker written while the coordinator holds the next transaction's
    verification (it waits for the markers): the V2 marker carries the epoch the next transaction
    runs at, so it does not void that transaction's verification (Kafka keeps a V2 guard of the
    marker's epoch); the batch is appended in the next transaction, which commits on its own."""
    pid, epoch = init(node)
    assert produce(node, 0, pid, epoch, 0, b"first") == ErrorCode.none
    gate = asyncio.Event()
    original = node.services.replicas.write_txn_marker

    async def held(topic, partition, *a, **kw):
        if (topic, partition) == ("t", 0):
            await gate.wait()
        return await original(topic, partition, *a, **kw)

    node.services.replicas.write_txn_marker = held
    code, _, epoch = end(node, pid, epoch, True)
    assert code == ErrorCode.none
    node.loop.call_later(0.1, gate.set)  # while the coordinator waits for the markers
    assert produce(node, 0, pid, epoch, 0, b"second") == ErrorCode.none
    assert end(node, pid, epoch, True)[0] == ErrorCode.none
    settled(node)
    assert committed_values(node, 0) == [b"first", b"second"]
    plog = node.services.logs.get("t", 0)
    assert plog.producer_state.ongoing == {} and plog.last_stable_offset == plog.high_watermark


def test_ending_the_next_transaction_while_the_last_ones_markers_are_written(node):
    """franz-go under V2 aborts a transaction whose produces were all refused (to clear anything
    they registered): that EndTxn, at the epoch the last end gave, can come while the last
    transaction's markers are still being written. Kafka would answer PRODUCER_FENCED (a fatal
    error) in that window; the coordinator waits for the markers instead and answers as it then
    would: the abort of an empty transaction, epoch bumped."""
    pid, epoch = init(node)
    assert produce(node, 0, pid, epoch, 0, b"first") == ErrorCode.none
    gate = asyncio.Event()
    original = node.services.replicas.write_txn_marker

    async def held(topic, partition, *a, **kw):
        if (topic, partition) == ("t", 0):
            await gate.wait()
        return await original(topic, partition, *a, **kw)

    node.services.replicas.write_txn_marker = held
    code, _, epoch = end(node, pid, epoch, True)
    assert code == ErrorCode.none
    node.loop.call_later(0.1, gate.set)
    assert end(node, pid, epoch, False) == (ErrorCode.none, pid, epoch + 1)
    settled(node)
    assert committed_values(node, 0) == [b"first"]
