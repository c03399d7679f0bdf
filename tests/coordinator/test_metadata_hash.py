"""KIP-1101 (Kafka 4.1): the hash of a consumer group's subscribed topics in its epoch record,
computed over Kafka's bytes (metadata_hash.py), the racks remembered while a broker is away
(topic_hashes.py), and what the coordinator does with it: a new hash is a new group epoch, once;
Kafka 4.0's ConsumerGroupPartitionMetadata is read and tombstoned, never written."""

from __future__ import annotations

import uuid

from gregor.cluster.metadata import BrokerEndpoint, ClusterMetadata, PartitionLeadership
from gregor.coordinator.group.consumer_group_manager import HASH_REFRESH_MS
from gregor.coordinator.group.metadata_hash import group_hash, topic_hash
from gregor.coordinator.group.topic_hashes import TopicHashes
from gregor.protocol.consumer_offsets import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    TopicMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tests.coordinator.consumer_clients import TOPICS, Client, ConsumerHarness, converge

ID = uuid.UUID("01234567-89ab-cdef-fedc-ba9876543210")


def test_topic_and_group_hashes():
    """The layout of Kafka's Utils.computeTopicHash / computeGroupHash (XXH3-64 over hash4j's
    little-endian stream; the figures were computed from that layout, not taken from Kafka), and
    the properties Kafka's UtilsTest checks: racks sorted, duplicates kept, every input counts,
    topic order by name."""
    a = topic_hash(ID, "foo", [["rack0", "rack1"], ["rack1", "rack2"]])
    assert a == 4231092367357902416
    assert topic_hash(ID, "foo", [["rack1", "rack0"], ["rack2", "rack1"]]) == a  # racks sorted
    assert topic_hash(ID, "foo", [[], []]) == -7646759818435901242
    assert topic_hash(ID, "foo", [["rack0", "rack1", "rack1"], ["rack1", "rack2"]]) == 4089360210242618416
    assert topic_hash(uuid.UUID(int=0), "bar", [[]]) == -8633742678349467716
    for other in (topic_hash(uuid.uuid4(), "foo", [["rack0", "rack1"], ["rack1", "rack2"]]),
                  topic_hash(ID, "fop", [["rack0", "rack1"], ["rack1", "rack2"]]),
                  topic_hash(ID, "foo", [["rack1", "rack2"], ["rack0", "rack1"]]),
                  topic_hash(ID, "foo", [["rack0", "rack1"], ["rack1", "rack2"], []])):
        assert other != a
    assert group_hash({}) == 0
    assert group_hash({"bar": 123, "foo": 456}) == 1482712172080382793 == group_hash({"foo": 456, "bar": 123})
    assert group_hash({"bar": 456, "foo": 123}) != group_hash({"bar": 123, "foo": 456})


class Brokers(ClusterMetadata):
    """Three brokers with racks, one replica of every partition on each; ``live`` may change."""

    def __init__(self) -> None:
        super().__init__(1)
        self.live = {b: f"r{b}" for b in (1, 2, 3)}

    def brokers(self) -> list[BrokerEndpoint]:
        return [BrokerEndpoint(b, "h", b, rack) for b, rack in sorted(self.live.items())]

    def partition(self, topic: str, partition: int) -> PartitionLeadership:
        return PartitionLeadership(1, 0, [1, 2, 3], [1, 2, 3])


def test_a_broker_away_keeps_its_rack_and_one_back_with_another_changes_the_hash():
    clock = [0.0]
    cluster = Brokers()
    hashes = TopicHashes(lambda name: (ID, 2) if name == "foo" else None, cluster, clock=lambda: clock[0])
    first = hashes.hash_of("foo")
    assert first == topic_hash(ID, "foo", [["r1", "r2", "r3"]] * 2)
    del cluster.live[2]  # broker 2 restarts: away, then back with the same rack
    clock[0] += 20
    assert hashes.hash_of("foo") == first
    cluster.live[2] = "r2"
    clock[0] += 20
    assert hashes.hash_of("foo") == first
    cluster.live[2] = "r9"  # back with another rack
    clock[0] += 2
    assert hashes.hash_of("foo") == topic_hash(ID, "foo", [["r1", "r3", "r9"]] * 2)
    assert hashes.hash_of("nope") == 0


class Racks(ConsumerHarness):
    """A harness whose topics' hashes the test sets (as a rack change would change them)."""

    def __init__(self, **kw) -> None:
        self.salt: dict[str, int] = {}
        super().__init__(**kw)

    def _collaborators(self):
        from dataclasses import replace

        def hash_of(name: str) -> int:
            meta = TOPICS.get(name)
            return 0 if meta is None else topic_hash(meta[0], name, [[f"r{self.salt.get(name, 0)}"]] * meta[1])
        return replace(super()._collaborators(), topic_hash=hash_of)


def written(h: ConsumerHarness) -> list[tuple[object, object]]:
    out = []
    for kb, vb in h.log:
        k = decode_key(kb)
        out.append((k, decode_value(k, vb)))
    return out


def epoch_records(h: ConsumerHarness) -> list[ConsumerGroupMetadataValue]:
    return [v for k, v in written(h) if isinstance(k, ConsumerGroupMetadataKey) and v is not None]


def test_the_epoch_record_carries_the_hash_and_a_rack_change_is_one_new_epoch():
    h = Racks()
    a, b = Client(h, ["foo", "bar"]), Client(h, ["foo"])
    converge([a, b])
    group = h.group()
    expected = group_hash({t: h.shard.ctx.topic_hash(t) for t in ("foo", "bar")})
    assert group.metadata_hash == expected != 0
    assert epoch_records(h)[-1].metadata_hash == expected
    assert epoch_records(h)[0].creation_time_ms >= 0  # set with the group's first epoch
    created = epoch_records(h)[0].creation_time_ms
    assert not any(isinstance(k, ConsumerGroupPartitionMetadataKey) and v is not None for k, v in written(h))
    epoch = group.group_epoch
    converge([a, b])
    assert h.group().group_epoch == epoch  # nothing changed: no new epoch
    h.salt["bar"] = 1  # the racks of bar's replicas changed
    h.sleep(HASH_REFRESH_MS)  # seen at the next heartbeat once the group's hash is recomputed
    converge([a, b])
    assert h.group().group_epoch == epoch + 1  # once
    assert epoch_records(h)[-1].creation_time_ms == created  # kept
    h.reload()
    converge([a, b])
    assert h.group().group_epoch == epoch + 1  # a reload is no change


def test_kafka_4_0_partition_metadata_is_read_then_tombstoned():
    """A group written by Kafka 4.0 (or Gregor before): ConsumerGroupPartitionMetadata and an
    epoch without a hash. The first heartbeat finds another hash: one new epoch, which
    tombstones the old record; replaying the tombstone clears it."""
    h = ConsumerHarness()
    foo_id, foo_n = TOPICS["foo"]
    for k, v in [(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(3)),
                 (ConsumerGroupPartitionMetadataKey("g"),
                  ConsumerGroupPartitionMetadataValue([TopicMetadata(foo_id, "foo", foo_n)]))]:
        h.log.append((encode_key(k), encode_value(v)))
    h.reload()
    group = h.group()
    assert group.has_partition_metadata_record and group.subscription_metadata == {"foo": (foo_id, foo_n)}
    a = Client(h, ["foo"])
    a.beat()
    assert h.group().group_epoch == 4
    assert (ConsumerGroupPartitionMetadataKey("g"), None) in written(h)
    assert not h.group().has_partition_metadata_record
