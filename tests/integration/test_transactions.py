"""Transactions with real clients against ``gregor serve``: confluent-kafka (librdkafka)
transactional producers, read_committed consumers of confluent-kafka, kafka-python and aiokafka,
offsets sent to transactions, zombie fencing, the coordinator aborting a transaction past its
timeout, and a broker SIGKILLed with transactions at every stage."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.waiting import wait_for


def create(bootstrap: str, name: str, partitions: int = 2) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def producer(bootstrap: str, tid: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def read(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int | None = None,
         idle_s: float = 2.0, timeout: float = 30) -> list[bytes]:
    """Every value of ``topic`` from offset 0, as one client sees it with ``isolation``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if (expected is None or len(out) >= expected) and len(eof) == partitions \
                        and time.monotonic() - last > idle_s:
                    break
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    continue
                raise KafkaException(m.error())
            eof.discard(m.partition())
            last = time.monotonic()
            out.append(m.value())
    finally:
        c.close()
    return out


def committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = c.committed([TopicPartition(topic, partition)], 10)
        return tp.offset
    finally:
        c.close()


def test_committed_and_aborted_transactions_as_each_isolation_level_reads_them(broker):
    create(broker.bootstrap, "tx")
    p = producer(broker.bootstrap, "tx-1")
    p.begin_transaction()
    for i in range(100):
        p.produce("tx", f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(50):
        p.produce("tx", f"a{i}".encode(), partition=i % 2)
    assert p.flush(10) == 0  # the aborted records are in the log
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("tx", f"d{i}".encode(), partition=i % 2)
    p.commit_transaction(30)

    committed = read(broker.bootstrap, "tx", 2, "read_committed", 110)
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(100)] + [f"d{i}".encode() for i in range(10)])
    everything = read(broker.bootstrap, "tx", 2, "read_uncommitted", 160)
    assert len(everything) == 160 and sum(v.startswith(b"a") for v in everything) == 50


def test_an_open_transaction_holds_back_read_committed_consumers_until_it_ends(broker):
    create(broker.bootstrap, "held", 1)
    p = producer(broker.bootstrap, "held-1")
    p.begin_transaction()
    for i in range(5):
        p.produce("held", f"x{i}".encode(), partition=0)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "held-reader",
                  "isolation.level": "read_committed"})
    try:
        # the last stable offset is the transaction's first offset: nothing to read yet
        low, high = c.get_watermark_offsets(TopicPartition("held", 0), 10)
        assert high == 0
        assert read(broker.bootstrap, "held", 1, "read_committed", idle_s=1.0) == []
        p.commit_transaction(30)
        assert wait_for(lambda: c.get_watermark_offsets(TopicPartition("held", 0), 10)[1] == 6, 10,
                        "the last stable offset past the marker")
    finally:
        c.close()
    assert read(broker.bootstrap, "held", 1, "read_committed", 5) == [f"x{i}".encode() for i in range(5)]


def test_offsets_sent_to_a_transaction_commit_and_abort_with_it(broker):
    create(broker.bootstrap, "in", 1)
    create(broker.bootstrap, "out", 1)
    group = "etl"
    meta_consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        metadata = meta_consumer.consumer_group_metadata()
        p = producer(broker.bootstrap, "etl-1")
        p.begin_transaction()
        p.produce("out", b"one", partition=0)
        p.send_offsets_to_transaction([TopicPartition("in", 0, 42)], metadata, 30)
        p.commit_transaction(30)
        assert wait_for(lambda: committed_offset(broker.bootstrap, group, "in", 0) == 42, 10, "offset 42 committed")
        p.begin_transaction()
        p.produce("out", b"two", partition=0)
        p.send_offsets_to_transaction([TopicPartition("in", 0, 99)], metadata, 30)
        p.abort_transaction(30)
        time.sleep(0.5)
        assert committed_offset(broker.bootstrap, group, "in", 0) == 42
    finally:
        meta_consumer.close()
    assert read(broker.bootstrap, "out", 1, "read_committed", 1) == [b"one"]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(broker):
    create(broker.bootstrap, "zombie", 1)
    first = producer(broker.bootstrap, "z-1")
    first.begin_transaction()
    first.produce("zombie", b"from the zombie", partition=0)
    assert first.flush(10) == 0
    second = producer(broker.bootstrap, "z-1")  # aborts the first's open transaction, bumps the epoch
    second.begin_transaction()
    second.produce("zombie", b"from the new instance", partition=0)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        first.commit_transaction(10)
    err = e.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH), err
    assert read(broker.bootstrap, "zombie", 1, "read_committed", 1) == [b"from the new instance"]


def test_the_coordinator_aborts_a_transaction_left_open_past_its_timeout(broker_factory):
    broker = broker_factory(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"})
    create(broker.bootstrap, "slow", 1)
    p = producer(broker.bootstrap, "slow-1", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    p.produce("slow", b"never committed", partition=0)
    assert p.flush(10) == 0
    # the coordinator aborts it: the marker moves the last stable offset past the records
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "slow-reader",
                       "isolation.level": "read_committed"})
    try:
        wait_for(lambda: reader.get_watermark_offsets(TopicPartition("slow", 0), 5)[1] == 2, 20,
                 "the abort marker written by the coordinator")
    finally:
        reader.close()
    assert read(broker.bootstrap, "slow", 1, "read_committed", idle_s=1.0) == []
    with pytest.raises(KafkaException):  # its epoch was bumped: the producer cannot commit
        p.commit_transaction(10)


def test_kafka_python_and_aiokafka_read_committed_consumers_skip_aborted_records(broker):
    create(broker.bootstrap, "mixed", 1)
    p = producer(broker.bootstrap, "mixed-1")
    expected = []
    for t in range(6):
        p.begin_transaction()
        for i in range(20):
            p.produce("mixed", f"{t}-{i}".encode(), partition=0)
        assert p.flush(10) == 0
        if t % 2 == 0:
            p.commit_transaction(30)
            expected += [f"{t}-{i}".encode() for i in range(20)]
        else:
            p.abort_transaction(30)

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                       enable_auto_commit=False, consumer_timeout_ms=3000)
    kc.assign([KTP("mixed", 0)])
    kc.seek(KTP("mixed", 0), 0)
    assert [m.value for m in kc] == expected
    kc.close()

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as ATP

        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
        await c.start()
        try:
            c.assign([ATP("mixed", 0)])
            c.seek(ATP("mixed", 0), 0)
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < len(expected) and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=500)
                for msgs in batches.values():
                    got += [m.value for m in msgs]
            await asyncio.sleep(1.0)
            batches = await c.getmany(timeout_ms=500)
            for msgs in batches.values():
                got += [m.value for m in msgs]
            return got
        finally:
            await c.stop()

    assert asyncio.run(aio()) == expected


def test_transactions_survive_a_broker_sigkill_at_every_stage(broker):
    """Committed, aborted, and open transactions, and the committed offsets of one, when the broker
    is SIGKILLed: after the restart read_committed sees exactly the committed ones, the open one
    is aborted by InitProducerId of the restarted producer, and the offsets are there."""
    create(broker.bootstrap, "crash", 2)
    group_consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "crash-etl"})
    metadata = group_consumer.consumer_group_metadata()
    group_consumer.close()
    p = producer(broker.bootstrap, "crash-1")
    p.begin_transaction()
    for i in range(40):
        p.produce("crash", f"c{i}".encode(), partition=i % 2)
    p.send_offsets_to_transaction([TopicPartition("in", 0, 7)], metadata, 30)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(20):
        p.produce("crash", f"a{i}".encode(), partition=i % 2)
    assert p.flush(10) == 0
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(20):
        p.produce("crash", f"o{i}".encode(), partition=i % 2)
    assert p.flush(10) == 0  # open when the broker dies
    broker.kill()
    broker.restart()
    assert wait_for(lambda: committed_offset(broker.bootstrap, "crash-etl", "in", 0) == 7, 30,
                    "the offset after restart")
    restarted = producer(broker.bootstrap, "crash-1")  # fences the open transaction: aborted
    restarted.begin_transaction()
    restarted.produce("crash", b"after", partition=0)
    restarted.commit_transaction(30)
    got = read(broker.bootstrap, "crash", 2, "read_committed", 41)
    assert sorted(got) == sorted([f"c{i}".encode() for i in range(40)] + [b"after"])
