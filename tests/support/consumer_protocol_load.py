"""A broker for consumer-protocol groups (KIP-848) and its topic under steady load, for the
integration tests of the consumer protocol (tests/integration/test_consumer_protocol.py,
tests/integration/test_mixed_groups.py): the broker's overrides, the topic and its partitions, a
producer writing to every partition steadily, and the partitions' log ends."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

PARTITIONS = 12
TOPIC = "kip848"
OVERRIDES = {
    "group.coordinator.rebalance.protocols": "classic,consumer",
    "group.consumer.min.heartbeat.interval.ms": "250", "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000",
    "group.initial.rebalance.delay.ms": "0",
}


class SteadyProducer:
    """Writes a message to every partition in turn, about 200 a second, until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.stop_ = threading.Event()
        self.sent = 0
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop_.is_set():
            for part in range(PARTITIONS):
                self.p.produce(TOPIC, str(self.sent).encode(), partition=part)
                self.sent += 1
            self.p.poll(0)
            time.sleep(0.06)

    def start(self) -> SteadyProducer:
        self.t.start()
        return self

    def stop(self) -> None:
        self.stop_.set()
        self.t.join()
        assert self.p.flush(10) == 0


def log_ends(bootstrap: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends-probe"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        c.close()
