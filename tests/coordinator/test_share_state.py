"""The share coordinator's shard (``__share_group_state``) without network, and its records and
the share groups' records in ``__consumer_offsets``: formats, merging, fencing, reloading."""

from __future__ import annotations

import uuid

import pytest

from gregor.coordinator.share.state_shard import RECORD_SERDE, ShareStateShard, merge
from gregor.protocol import consumer_offsets as co
from gregor.protocol import share_group_records as sg
from gregor.protocol import share_state_records as ss
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_state_records import PersistedBatch as B

T = uuid.UUID("12345678-1234-5678-1234-567812345678")
KEY = ss.SharePartitionKey("g", T, 3)
AVAILABLE, ACKED, ARCHIVED = 0, 2, 4


class Harness:
    def __init__(self) -> None:
        self.now = 1000
        self.shard = ShareStateShard(0, lambda: self.now)
        self.log: list[tuple[bytes, bytes | None]] = []

    def run(self, result):  # type: ignore[no-untyped-def]
        for k, v in result.records:
            kb, vb = RECORD_SERDE.encode_key(k), RECORD_SERDE.encode_value(v)
            self.log.append((kb, vb))
            dk = RECORD_SERDE.decode_key(kb)
            self.shard.replay(dk, RECORD_SERDE.decode_value(dk, vb))
        if isinstance(result.response, KafkaError):
            raise result.response

    def reload(self) -> ShareStateShard:
        shard = ShareStateShard(0, lambda: self.now)
        latest: dict[bytes, bytes | None] = {}
        for kb, vb in self.log:
            latest[kb] = vb
        for kb, vb in latest.items():
            dk = RECORD_SERDE.decode_key(kb)
            shard.replay(dk, RECORD_SERDE.decode_value(dk, vb))
        return shard


def test_write_merges_batches_and_drops_what_is_below_the_start_offset():
    h = Harness()
    h.run(h.shard.write(KEY, 0, 5, 10, [B(10, 19, AVAILABLE, 1)]))
    h.run(h.shard.write(KEY, 0, 5, 12, [B(12, 13, ACKED, 1), B(15, 15, ARCHIVED, 5)]))
    state = h.shard.read(KEY)
    assert state is not None and state.start_offset == 12 and state.leader_epoch == 5
    assert state.batches == [B(12, 13, ACKED, 1), B(14, 14, AVAILABLE, 1), B(15, 15, ARCHIVED, 5),
                             B(16, 19, AVAILABLE, 1)]
    assert h.reload().read(KEY) == state  # the latest snapshot is the whole state


def test_an_older_leader_or_state_epoch_is_fenced():
    h = Harness()
    h.run(h.shard.write(KEY, 2, 5, 0, []))
    with pytest.raises(KafkaError) as e:
        h.run(h.shard.write(KEY, 2, 4, 0, [B(0, 0, ACKED, 1)]))
    assert e.value.code == ErrorCode.fenced_leader_epoch
    with pytest.raises(KafkaError) as e:
        h.run(h.shard.write(KEY, 1, 6, 0, []))
    assert e.value.code == ErrorCode.fenced_state_epoch
    assert h.shard.read(KEY).batches == []  # type: ignore[union-attr]


def test_initialize_then_delete():
    h = Harness()
    h.run(h.shard.initialize(KEY, 1, 42))
    assert h.shard.read(KEY).start_offset == 42  # type: ignore[union-attr]
    assert h.shard.keys_of("g") == [KEY]
    h.run(h.shard.delete([KEY]))
    assert h.shard.read(KEY) is None and h.reload().read(KEY) is None


def test_merge_is_offset_by_offset():
    assert merge([B(0, 9, AVAILABLE, 1)], [B(3, 4, ACKED, 2)], 0) == [
        B(0, 2, AVAILABLE, 1), B(3, 4, ACKED, 2), B(5, 9, AVAILABLE, 1)]
    assert merge([B(0, 9, AVAILABLE, 1)], [], 5) == [B(5, 9, AVAILABLE, 1)]


def test_state_records_round_trip_and_kafkas_key_layout():
    snap = ss.ShareSnapshotValue(3, 1, 7, 100, 11, 12, [B(100, 104, AVAILABLE, 2)], delivery_complete_count=4)
    kb = ss.encode_key(ss.ShareSnapshotKey(KEY))
    assert kb[:2] == b"\x00\x00" and kb[2:4] == b"\x00\x01" and kb[4:5] == b"g" and kb[5:21] == T.bytes
    assert kb[21:] == (3).to_bytes(4, "big")
    assert ss.decode_value(ss.decode_key(kb), ss.encode_value(snap)) == snap
    upd = ss.ShareUpdateValue(3, 7, -1, [B(101, 101, ACKED, 2)])
    ku = ss.encode_key(ss.ShareUpdateKey(KEY))
    assert ku[:2] == b"\x00\x01"
    assert ss.decode_value(ss.decode_key(ku), ss.encode_value(upd)) == upd
    with pytest.raises(ss.StateFormatError):
        ss.decode_key(b"\x00\x09" + kb[2:])
    with pytest.raises(ss.StateFormatError):
        ss.decode_value(ss.ShareSnapshotKey(KEY), ss.encode_value(snap)[:-5])  # type: ignore[index]


def test_kafkas_coordinator_key_and_partition():
    # Kafka's Uuid.toString is base64 without padding; the key is group:topicId:partition
    assert KEY.coordinator_key() == "g:EjRWeBI0VngSNFZ4EjRWeA:3"
    assert ss.partition_for(KEY, 50) == co.kafka_abs(co.java_string_hashcode("g:EjRWeBI0VngSNFZ4EjRWeA:3")) % 50


@pytest.mark.parametrize("key,value", [
    (sg.ShareGroupMemberMetadataKey("g", "m"), sg.ShareGroupMemberMetadataValue("r", "c", "/h", ["a", "b"])),
    (sg.ShareGroupMetadataKey("g"), sg.ShareGroupMetadataValue(7, -123456789)),
    (sg.ShareGroupTargetAssignmentMetadataKey("g"), sg.ShareGroupTargetAssignmentMetadataValue(7)),
    (sg.ShareGroupTargetAssignmentMemberKey("g", "m"), sg.ShareGroupTargetAssignmentMemberValue({T: (0, 2)})),
    (sg.ShareGroupCurrentMemberAssignmentKey("g", "m"), sg.ShareGroupCurrentMemberAssignmentValue(7, 6, 0, {T: (1,)})),
    (sg.ShareGroupStatePartitionMetadataKey("g"),
     sg.ShareGroupStatePartitionMetadataValue({T: ("t", (0, 1))}, {uuid.UUID(int=9): "gone"})),
])
def test_share_group_records_round_trip_with_kafkas_record_types(key, value):  # type: ignore[no-untyped-def]
    kb = co.encode_key(key)
    kafka_types = {sg.ShareGroupMemberMetadataKey: 10, sg.ShareGroupMetadataKey: 11,
                   sg.ShareGroupTargetAssignmentMetadataKey: 12, sg.ShareGroupTargetAssignmentMemberKey: 13,
                   sg.ShareGroupCurrentMemberAssignmentKey: 14, sg.ShareGroupStatePartitionMetadataKey: 15}
    assert int.from_bytes(kb[:2], "big") == kafka_types[type(key)]
    decoded = co.decode_key(kb)
    assert decoded == key and co.decode_value(decoded, co.encode_value(value)) == value
    assert co.decode_value(decoded, None) is None


def test_batches_of_any_size_cost_their_number_not_their_offsets():
    """A fuzzed WriteShareGroupState with a batch of 2**62 offsets wedged the broker (merged
    offset by offset); now ranges are merged as ranges."""
    huge = B(0, 2**62, AVAILABLE, 1)
    assert merge([huge], [B(10, 2**61, ACKED, 1)], 5) == [B(5, 9, AVAILABLE, 1), B(10, 2**61, ACKED, 1),
                                                          B(2**61 + 1, 2**62, AVAILABLE, 1)]
    h = Harness()
    h.run(h.shard.write(KEY, 0, 1, 0, [huge]))
    assert h.shard.read(KEY).batches == [huge]  # type: ignore[union-attr]
