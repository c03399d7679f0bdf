"""Kafka's exact admin and produce semantics, through the clients people use (confluent-kafka's
AdminClient and Producer, kafka-python): ListOffsets max timestamp (KAFKA-16310), authorized
operations (KIP-430), IncrementalAlterConfigs APPEND/SUBTRACT (KIP-339), Produce record_errors
(KIP-467), DeleteRecords, dynamic broker configs and GROUP config resources."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from gregor.admin.wire_client import WireClient as Wire

TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
             AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
CLUSTER_OPS = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
               AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE}
GROUP_OPS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
             AclOperation.ALTER_CONFIGS}


def admin(b) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def create(a: AdminClient, name: str, partitions: int = 1, **config: str) -> None:
    for f in a.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        f.result(10)


def produce(b, topic: str, records: list[tuple[bytes | None, bytes, int | None]], partition: int = 0,
            **conf: str | int) -> list[KafkaError | None]:
    """Produce in one batch (long linger, one flush); the delivery error of each record, in order."""
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2000, **conf})
    errors: list[KafkaError | None] = [None] * len(records)

    def report(i: int):
        return lambda err, _msg: errors.__setitem__(i, err)

    for i, (key, value, ts) in enumerate(records):
        kwargs = {"timestamp": ts} if ts is not None else {}
        p.produce(topic, value, key, partition=partition, on_delivery=report(i), **kwargs)
    assert p.flush(30) == 0
    return errors


def config_of(a: AdminClient, restype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    (f,) = a.describe_configs([ConfigResource(restype, name)]).values()
    return f.result(10)


def incremental(a: AdminClient, restype: ResourceType, name: str, *entries: tuple[str, str | None, AlterConfigOpType],
                ) -> None:
    res = ConfigResource(restype, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries])
    (f,) = a.incremental_alter_configs([res]).values()
    f.result(10)


def one(futures: dict):
    """The result of a single-entry future map (the map must stay referenced while waiting: its
    per-entry futures are completed from the whole request's future, which it holds)."""
    (f,) = futures.values()
    return f.result(10)


def kafka_error_code(excinfo: pytest.ExceptionInfo[KafkaException]) -> int:
    return int(excinfo.value.args[0].code())


# -- ListOffsets -3 --------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_list_offsets_max_timestamp_is_the_record_not_the_batch(broker, codec):
    a = admin(broker)
    create(a, "maxts")
    now = int(time.time() * 1000)
    produce(broker, "maxts", [(b"k", b"a", now + 100), (b"k", b"b", now + 400), (b"k", b"c", now + 250)],
            **{"compression.type": codec})
    tp = TopicPartition("maxts", 0)
    res = one(a.list_offsets({tp: OffsetSpec.max_timestamp()}))
    assert (res.offset, res.timestamp) == (1, now + 400)
    # a later batch with a lower timestamp does not move it; a later record with a higher one does
    produce(broker, "maxts", [(b"k", b"d", now + 50), (b"k", b"e", now + 500), (b"k", b"f", now + 500)],
            **{"compression.type": codec})
    res = one(a.list_offsets({tp: OffsetSpec.max_timestamp()}))
    assert (res.offset, res.timestamp) == (4, now + 500)


def test_list_offsets_max_timestamp_across_segments_and_restart(broker):
    """The segment holding the largest timestamp is found from the segments' time indexes, also
    after a restart (indexes read back from disk) and after DeleteRecords moved the start."""
    a = admin(broker)
    create(a, "maxts-segs", **{"segment.bytes": "1000"})
    now = int(time.time() * 1000)
    stamps = [now + i for i in range(30)]
    stamps[17] = now + 1000  # the largest, in a middle segment, twice
    stamps[22] = now + 1000
    for ts in stamps:  # one record per batch: 30 batches over several segments
        produce(broker, "maxts-segs", [(b"k", b"v" * 200, ts)], **{"linger.ms": 0})
    assert len(list((broker.data_dir / "maxts-segs-0").glob("*.log"))) > 3
    tp = TopicPartition("maxts-segs", 0)
    res = one(a.list_offsets({tp: OffsetSpec.max_timestamp()}))
    assert (res.offset, res.timestamp) == (17, now + 1000)
    broker.restart()
    a = admin(broker)
    res = one(a.list_offsets({tp: OffsetSpec.max_timestamp()}))
    assert (res.offset, res.timestamp) == (17, now + 1000)
    one(a.delete_records([TopicPartition("maxts-segs", 0, 18)]))
    res = one(a.list_offsets({tp: OffsetSpec.max_timestamp()}))
    assert (res.offset, res.timestamp) == (22, now + 1000)


def test_list_offsets_max_timestamp_empty_partition(broker):
    a = admin(broker)
    create(a, "maxts-empty")
    res = one(a.list_offsets({TopicPartition("maxts-empty", 0): OffsetSpec.max_timestamp()}))
    assert res.offset == -1


# -- authorized operations -------------------------------------------------------------------------
def test_authorized_operations_when_asked(broker):
    a = admin(broker)
    create(a, "authz")
    asked = a.describe_topics(TopicCollection(["authz"]), include_authorized_operations=True)["authz"].result(10)
    assert set(asked.authorized_operations) == TOPIC_OPS
    plain = a.describe_topics(TopicCollection(["authz"]))["authz"].result(10)
    assert not plain.authorized_operations
    cluster = a.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == CLUSTER_OPS
    assert not a.describe_cluster().result(10).authorized_operations

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "authz-group", "auto.offset.reset": "earliest"})
    c.subscribe(["authz"])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    try:
        g = a.describe_consumer_groups(["authz-group"], include_authorized_operations=True)["authz-group"].result(10)
        assert set(g.authorized_operations) == GROUP_OPS
        g = a.describe_consumer_groups(["authz-group"])["authz-group"].result(10)
        assert not g.authorized_operations
    finally:
        c.close()


def test_metadata_v8_cluster_authorized_operations(broker):
    w = Wire(broker.bootstrap)
    try:
        asked = w.call(3, 8, {"topics": None, "allow_auto_topic_creation": False,
                              "include_cluster_authorized_operations": True,
                              "include_topic_authorized_operations": True})
        assert asked.cluster_authorized_operations == 0b1111110100000  # bits 5, 7-12
        plain = w.call(3, 8, {"topics": None, "allow_auto_topic_creation": False,
                              "include_cluster_authorized_operations": False,
                              "include_topic_authorized_operations": False})
        assert plain.cluster_authorized_operations == -2147483648
    finally:
        w.close()


# -- IncrementalAlterConfigs APPEND / SUBTRACT -----------------------------------------------------
def test_incremental_append_subtract_on_list_configs(broker):
    a = admin(broker)
    create(a, "lists")
    incremental(a, ResourceType.TOPIC, "lists", ("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert config_of(a, ResourceType.TOPIC, "lists")["cleanup.policy"].value == "delete,compact"
    incremental(a, ResourceType.TOPIC, "lists", ("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert config_of(a, ResourceType.TOPIC, "lists")["cleanup.policy"].value == "delete,compact"
    incremental(a, ResourceType.TOPIC, "lists", ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert config_of(a, ResourceType.TOPIC, "lists")["cleanup.policy"].value == "compact"
    # the topic is compacted now: a keyless record is refused
    (err,) = produce(broker, "lists", [(None, b"v", None)])
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    # APPEND / SUBTRACT on a non-list config: INVALID_CONFIG
    with pytest.raises(KafkaException) as e:
        incremental(a, ResourceType.TOPIC, "lists", ("retention.ms", "1000", AlterConfigOpType.APPEND))
    assert kafka_error_code(e) == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as e:
        incremental(a, ResourceType.TOPIC, "lists", ("retention.ms", "1000", AlterConfigOpType.SUBTRACT))
    assert kafka_error_code(e) == KafkaError.INVALID_CONFIG


# -- Produce record_errors -------------------------------------------------------------------------
def test_produce_record_errors_name_the_keyless_records(broker):
    """librdkafka 0011 record_fail: 100 records in one batch to a compacted topic, every 10th
    without a key: those 10 fail with INVALID_RECORD, the other 90 with INVALID_DIFFERENT_RECORD."""
    a = admin(broker)
    create(a, "rec-errors", **{"cleanup.policy": "compact"})
    records = [(None if i % 10 == 0 else b"k%d" % i, b"v%d" % i, None) for i in range(100)]
    errors = produce(broker, "rec-errors", records, **{"batch.num.messages": 1000})
    codes = [e.code() if e is not None else None for e in errors]
    assert [i for i, c in enumerate(codes) if c == KafkaError.INVALID_RECORD] == list(range(0, 100, 10))
    assert codes.count(KafkaError._INVALID_DIFFERENT_RECORD) == 90
    # nothing of that batch was written
    lo, hi = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"}).get_watermark_offsets(
        TopicPartition("rec-errors", 0), 10)
    assert (lo, hi) == (0, 0)
    # the keyed records go through when sent again
    assert produce(broker, "rec-errors", [r for r in records if r[0] is not None]) == [None] * 90


def test_produce_record_errors_over_the_wire_v8(broker):
    """kafka-python-independent check of the v8 response fields themselves."""
    from gregor.protocol.records import build_batch

    a = admin(broker)
    create(a, "rec-errors-wire", **{"cleanup.policy": "compact"})
    batch = build_batch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")], timestamp=int(time.time() * 1000))
    w = Wire(broker.bootstrap)
    try:
        resp = w.call(0, 8, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": "rec-errors-wire", "partition_data": [{"index": 0, "records": batch}]}]})
    finally:
        w.close()
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == 87  # INVALID_RECORD
    assert [r.batch_index for r in p.record_errors] == [1, 3]
    assert all("key" in (r.batch_index_error_message or "") for r in p.record_errors)
    assert p.error_message


def _peak_rss_kib(pid: int) -> int:
    from pathlib import Path

    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_compacted_topic_key_check_holds_no_decompression_bomb(broker):
    """A 13 KB zstd batch inflating to 400 MB, produced to a compacted topic (whose keys the broker
    must read): refused with MESSAGE_TOO_LARGE, the broker's peak memory barely moves."""
    from gregor.protocol import compression
    from gregor.protocol.records import Record, build_batch

    a = admin(broker)
    create(a, "bomb", **{"cleanup.policy": "compact"})
    bomb = build_batch([Record(0, 0, b"k", bytes(400 << 20))], codec=compression.ZSTD)
    assert len(bomb) < 20_000
    before = _peak_rss_kib(broker.proc.pid)
    w = Wire(broker.bootstrap)
    try:
        resp = w.call(0, 7, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": "bomb", "partition_data": [{"index": 0, "records": bomb}]}]})
    finally:
        w.close()
    assert resp.responses[0].partition_responses[0].error_code == 10  # MESSAGE_TOO_LARGE
    assert _peak_rss_kib(broker.proc.pid) - before < 100 << 10  # the bound is 64 MiB
    assert produce(broker, "bomb", [(b"k", b"v", None)], **{"compression.type": "zstd"}) == [None]


# -- DeleteRecords ---------------------------------------------------------------------------------
def _watermarks(b, topic: str, partition: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wm"})
    try:
        return tuple(c.get_watermark_offsets(TopicPartition(topic, partition), 10))  # type: ignore[return-value]
    finally:
        c.close()


def test_delete_records(broker):
    a = admin(broker)
    create(a, "delrec", 2, **{"segment.bytes": "2000"})
    create(a, "delrec-compacted", **{"cleanup.policy": "compact"})
    for part in (0, 1):
        produce(broker, "delrec", [(b"k", b"x" * 100, None)] * 100, partition=part, **{"batch.num.messages": 5})
    seg_dir = broker.data_dir / "delrec-0"
    segments_before = sorted(seg_dir.glob("*.log"))
    assert len(segments_before) > 3

    res = a.delete_records([TopicPartition("delrec", 0, 30), TopicPartition("delrec", 1, -1)])
    lows = {tp.partition: f.result(10).low_watermark for tp, f in res.items()}
    assert lows == {0: 30, 1: 100}
    assert _watermarks(broker, "delrec", 0) == (30, 100)
    assert _watermarks(broker, "delrec", 1) == (100, 100)
    earliest = one(a.list_offsets({TopicPartition("delrec", 0): OffsetSpec.earliest()}))
    assert earliest.offset == 30
    # whole segments below the new start are gone; the one holding offset 30 stays
    after = sorted(seg_dir.glob("*.log"))
    assert len(after) < len(segments_before)
    assert int(after[0].stem) <= 30

    # the start offset never moves back; beyond the high watermark and compacted topics are refused
    assert one(a.delete_records([TopicPartition("delrec", 0, 10)])).low_watermark == 30
    with pytest.raises(KafkaException) as e:
        one(a.delete_records([TopicPartition("delrec", 0, 101)]))
    assert kafka_error_code(e) == KafkaError.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaException) as e:
        one(a.delete_records([TopicPartition("delrec-compacted", 0, 0)]))
    assert kafka_error_code(e) == KafkaError.POLICY_VIOLATION

    # a read below the start offset is OFFSET_OUT_OF_RANGE; from the beginning starts at 30
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError

    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none", enable_auto_commit=False,
                       consumer_timeout_ms=3000)
    try:
        kc.assign([KTP("delrec", 0)])
        kc.seek(KTP("delrec", 0), 10)
        with pytest.raises(OffsetOutOfRangeError):
            for _ in range(20):
                kc.poll(500)
        kc.seek_to_beginning(KTP("delrec", 0))
        first = next(iter(kc))
        assert first.offset == 30
    finally:
        kc.close()

    # it survives a restart, clean or not
    broker.restart()
    assert _watermarks(broker, "delrec", 0) == (30, 100)
    a = admin(broker)
    one(a.delete_records([TopicPartition("delrec", 0, 55)]))
    broker.kill()
    broker.start()
    assert _watermarks(broker, "delrec", 0) == (55, 100)
    assert _watermarks(broker, "delrec", 1) == (100, 100)



def test_recreated_topic_does_not_inherit_the_deleted_ones_log_start(broker):
    """DeleteRecords moved the old topic's start to 30; the topic is deleted, made again under the
    same name and written, then the broker is killed before any periodic checkpoint: the new
    partition starts at 0 with all its records."""
    a = admin(broker)
    create(a, "reborn")
    produce(broker, "reborn", [(None, b"old", None)] * 50)
    assert one(a.delete_records([TopicPartition("reborn", 0, 30)])).low_watermark == 30
    for f in a.delete_topics(["reborn"]).values():
        f.result(10)
    deadline = time.monotonic() + 10
    while True:
        try:
            create(a, "reborn")
            break
        except KafkaException:  # still marked for deletion
            assert time.monotonic() < deadline
            time.sleep(0.2)
    produce(broker, "reborn", [(None, b"new", None)] * 5)
    broker.kill()
    broker.start()
    assert _watermarks(broker, "reborn", 0) == (0, 5)

# -- dynamic broker configs ------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_dynamic_broker_configs_apply_at_once_and_persist(broker):
    from confluent_kafka.admin import ConfigSource

    a = admin(broker)
    create(a, "dyn")
    create(a, "dyn-own", **{"retention.ms": "1000"})
    incremental(a, ResourceType.BROKER, "0", ("log.retention.ms", "3600000", AlterConfigOpType.SET))
    entry = config_of(a, ResourceType.BROKER, "0")["log.retention.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                                                             False)
    topic = config_of(a, ResourceType.TOPIC, "dyn")["retention.ms"]
    assert (topic.value, topic.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert config_of(a, ResourceType.TOPIC, "dyn-own")["retention.ms"].value == "1000"  # its override wins

    # a list key: APPEND makes every topic without an override compacted, SUBTRACT undoes it
    incremental(a, ResourceType.BROKER, "0", ("log.cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert config_of(a, ResourceType.TOPIC, "dyn")["cleanup.policy"].value == "delete,compact"
    (err,) = produce(broker, "dyn", [(None, b"v", None)])
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    incremental(a, ResourceType.BROKER, "0", ("log.cleanup.policy", "compact", AlterConfigOpType.SUBTRACT))
    assert config_of(a, ResourceType.TOPIC, "dyn")["cleanup.policy"].value == "delete"
    assert produce(broker, "dyn", [(None, b"v", None)]) == [None]

    # Kafka's dynamic keys without effect on one node are accepted (librdkafka 0081 sets this one);
    # the legacy AlterConfigs replaces the whole per-broker set
    incremental(a, ResourceType.BROKER, "0", ("sasl.kerberos.min.time.before.relogin", "58000",
                                              AlterConfigOpType.SET))
    assert config_of(a, ResourceType.BROKER, "0")["sasl.kerberos.min.time.before.relogin"].value == "58000"
    res = ConfigResource(ResourceType.BROKER, "0", set_config={"sasl.kerberos.min.time.before.relogin": "60000",
                                                               "log.retention.ms": "7200000"})
    for f in a.alter_configs([res]).values():
        f.result(10)
    # a cluster-wide default sits below the per-broker value
    w = Wire(broker.bootstrap)  # the admin client refuses an empty resource name: over the wire
    try:
        resp = w.call(44, 1, {"validate_only": False, "resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "log.segment.bytes", "config_operation": 0, "value": "10485760"}]}]})
        assert resp.responses[0].error_code == 0
        resp = w.call(44, 1, {"validate_only": False, "resources": [  # per-broker only (a listener setting)
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "sasl.kerberos.min.time.before.relogin", "config_operation": 0, "value": "1"}]}]})
        assert resp.responses[0].error_code == KafkaError.INVALID_REQUEST
        described = w.call(32, 4, {"resources": [{"resource_type": 4, "resource_name": "",
                                                  "configuration_keys": None}],
                                   "include_synonyms": False, "include_documentation": False})
        assert [(c.name, c.value, c.config_source) for c in described.results[0].configs] == [
            ("log.segment.bytes", "10485760", 3)]  # only the cluster-wide dynamic values
    finally:
        w.close()
    seg = config_of(a, ResourceType.BROKER, "0")["log.segment.bytes"]
    assert (seg.value, seg.source) == ("10485760", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # keys that cannot change at run time, and bad values: INVALID_REQUEST, as Kafka answers
    for key, value in [("log.dirs", "/elsewhere"), ("auto.create.topics.enable", "false"),
                       ("log.retention.ms", "soon"), ("no.such.key", "1")]:
        with pytest.raises(KafkaException) as e:
            incremental(a, ResourceType.BROKER, "0", (key, value, AlterConfigOpType.SET))
        assert kafka_error_code(e) == KafkaError.INVALID_REQUEST, key
    with pytest.raises(KafkaException) as e:
        incremental(a, ResourceType.BROKER, "0", ("log.retention.ms", "1", AlterConfigOpType.APPEND))
    assert kafka_error_code(e) == KafkaError.INVALID_CONFIG

    broker.restart()
    a = admin(broker)
    cfg = config_of(a, ResourceType.BROKER, "0")
    assert cfg["log.retention.ms"].value == "7200000"
    assert cfg["sasl.kerberos.min.time.before.relogin"].value == "60000"
    assert cfg["log.segment.bytes"].value == "10485760"
    assert config_of(a, ResourceType.TOPIC, "dyn")["retention.ms"].value == "7200000"
    incremental(a, ResourceType.BROKER, "0", ("log.retention.ms", None, AlterConfigOpType.DELETE))
    entry = config_of(a, ResourceType.BROKER, "0")["log.retention.ms"]
    assert entry.source == ConfigSource.DEFAULT_CONFIG.value


def test_group_config_resources(broker):
    a = admin(broker)
    cfg = config_of(a, ResourceType.GROUP, "no-such-group")
    assert cfg["consumer.session.timeout.ms"].value == "45000"
    assert cfg["consumer.heartbeat.interval.ms"].value == "5000"
    incremental(a, ResourceType.GROUP, "billing", ("consumer.session.timeout.ms", "50000", AlterConfigOpType.SET))
    assert config_of(a, ResourceType.GROUP, "billing")["consumer.session.timeout.ms"].value == "50000"
    assert config_of(a, ResourceType.GROUP, "other")["consumer.session.timeout.ms"].value == "45000"
    for key, value in [("consumer.session.timeout.ms", "1000"), ("no.such.group.key", "1")]:
        with pytest.raises(KafkaException) as e:
            incremental(a, ResourceType.GROUP, "billing", (key, value, AlterConfigOpType.SET))
        assert kafka_error_code(e) == KafkaError.INVALID_CONFIG
    broker.restart()
    a = admin(broker)
    assert config_of(a, ResourceType.GROUP, "billing")["consumer.session.timeout.ms"].value == "50000"
    incremental(a, ResourceType.GROUP, "billing", ("consumer.session.timeout.ms", None, AlterConfigOpType.DELETE))
    assert config_of(a, ResourceType.GROUP, "billing")["consumer.session.timeout.ms"].value == "45000"


# -- DescribeTopicPartitions -----------------------------------------------------------------------
def test_describe_topic_partitions_pages_with_a_cursor(broker):
    from kafka import KafkaAdminClient

    a = admin(broker)
    create(a, "dtp-a", 3)
    create(a, "dtp-b", 2)
    ka = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        res = ka.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-none"])
        assert [t["name"] for t in res["topics"]] == ["dtp-a", "dtp-b", "dtp-none"]
        assert [len(t["partitions"]) for t in res["topics"]] == [3, 2, 0]
        assert res["topics"][2]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert res["topics"][0]["topic_authorized_operations"] == sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
        assert res["next_cursor"] is None
        # two partitions at a time: a-0 a-1 | a-2 b-0 | b-1
        seen, cursor, pages = [], None, 0
        while True:
            page = ka.describe_topic_partitions(["dtp-a", "dtp-b"], response_partition_limit=2, cursor=cursor)
            pages += 1
            seen += [(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [("dtp-a", 0), ("dtp-a", 1), ("dtp-a", 2), ("dtp-b", 0), ("dtp-b", 1)]
        assert pages == 3
    finally:
        ka.close()


# -- SCRAM credentials -----------------------------------------------------------------------------
def test_user_scram_credentials(broker):
    import stat

    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    a = admin(broker)
    with pytest.raises(KafkaException) as e:
        one(a.describe_user_scram_credentials(["alice"]))
    assert kafka_error_code(e) == KafkaError.RESOURCE_NOT_FOUND
    up = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10000),
                                      b"password", b"salt")
    assert one(a.alter_user_scram_credentials([up])) is None
    desc = one(a.describe_user_scram_credentials(["alice"]))
    assert [(c.mechanism, c.iterations) for c in desc.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256,
                                                                                   10000)]
    # the file holds Kafka's derived keys, not the password, readable by the owner only
    path = broker.data_dir / "scram-credentials.json"
    assert b"password" not in path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    few = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"pw")
    with pytest.raises(KafkaException) as e:
        one(a.alter_user_scram_credentials([few]))
    assert kafka_error_code(e) == KafkaError.UNACCEPTABLE_CREDENTIAL
    twice = a.alter_user_scram_credentials([up, UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)])
    with pytest.raises(KafkaException) as e:
        twice["alice"].result(10)
    assert kafka_error_code(e) == KafkaError.DUPLICATE_RESOURCE

    broker.restart()
    a = admin(broker)
    assert one(a.describe_user_scram_credentials(["alice"])).scram_credential_infos[0].iterations == 10000
    assert one(a.alter_user_scram_credentials([UserScramCredentialDeletion(
        "alice", ScramMechanism.SCRAM_SHA_256)])) is None
    with pytest.raises(KafkaException) as e:
        one(a.describe_user_scram_credentials(["alice"]))
    assert kafka_error_code(e) == KafkaError.RESOURCE_NOT_FOUND
    with pytest.raises(KafkaException) as e:
        one(a.alter_user_scram_credentials([UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)]))
    assert kafka_error_code(e) == KafkaError.RESOURCE_NOT_FOUND


def test_dynamic_configs_file_with_a_key_no_longer_dynamic_is_skipped(broker):
    import json

    a = admin(broker)
    incremental(a, ResourceType.BROKER, "0", ("log.retention.ms", "3600000", AlterConfigOpType.SET))
    broker.stop()
    path = broker.data_dir / "dynamic-configs.json"
    data = json.loads(path.read_text())
    data["broker"]["log.dirs"] = "/elsewhere"
    path.write_text(json.dumps(data))
    broker.start()
    cfg = config_of(admin(broker), ResourceType.BROKER, "0")
    assert cfg["log.retention.ms"].value == "3600000"
    assert "ignoring log.dirs" in broker.output()
