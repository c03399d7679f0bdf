"""SIGKILL in the middle of a produce stream: after restart every acknowledged record is there,
once, at the offset it was acknowledged with; offsets are contiguous."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def test_sigkill_during_produce_stream_loses_and_duplicates_nothing(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("crash", 2)])["crash"].result(10)
    acked: dict[bytes, tuple[int, int]] = {}

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())

    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 1,
                  "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 100})
    i = 0
    while len(acked) < 3000:
        p.produce("crash", value=b"%06d" % i, partition=i % 2, on_delivery=on_delivery)
        i += 1
        p.poll(0)
        if i % 500 == 0:
            p.poll(0.01)
    broker.kill()  # mid-stream: requests are in flight
    for _ in range(1000):  # keeps producing while the broker is down
        p.produce("crash", value=b"%06d" % i, partition=i % 2, on_delivery=on_delivery)
        i += 1
    p.poll(0.5)
    broker.start()
    assert p.flush(90) == 0
    assert len(acked) == i  # idempotent producer: everything eventually acknowledged

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "verify", "enable.auto.commit": False})
    c.assign([TopicPartition("crash", p_, 0) for p_ in range(2)])
    seen: dict[bytes, tuple[int, int]] = {}
    deadline = time.monotonic() + 60
    while len(seen) < i and time.monotonic() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        assert m.error() is None
        assert m.value() not in seen, f"duplicate {m.value()!r}"
        seen[m.value()] = (m.partition(), m.offset())
    c.close()
    assert seen == acked
    for part in range(2):
        offs = sorted(o for p_, o in seen.values() if p_ == part)
        assert offs == list(range(len(offs)))
    assert "recovering" in broker.output()
