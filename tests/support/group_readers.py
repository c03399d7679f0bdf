"""Consumers with librdkafka's defaults (client id ``rdkafka``) in several groups reading one
topic together, against the brokers' per-group consumption counts: the ground truth for fetch
attribution (docs/metrics.md)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from tests.support.metrics_scrape import scrape


class Reader(threading.Thread):
    """A subscribed consumer with librdkafka's defaults (client id ``rdkafka``) reading until told
    to stop or until it has ``limit`` records; commits what it read when it stops."""

    def __init__(self, bootstrap: str, group: str, topic: str, limit: int | None = None) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        self.limit = limit
        self.read = 0
        self.assigned = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and (self.limit is None or self.read < self.limit):
            want = 100 if self.limit is None else min(100, self.limit - self.read)
            msgs = [m for m in self.consumer.consume(want, 0.2) if m.error() is None]
            self.read += len(msgs)
            if self.consumer.assignment():
                self.assigned.set()
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as e:  # nothing new since the last automatic commit
            assert e.args[0].code() == KafkaError._NO_OFFSET, e
        self.consumer.close()


def group_counts(ports: list[int], topic: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for port in ports:
        _, s = scrape(port)
        for lab, v in s.get("gregor_group_consumed_messages_total", []):
            assert lab["group"], f"a sample without a group: {lab}"
            if lab["topic"] == topic:
                out[lab["group"]] = out.get(lab["group"], 0.0) + v
    return {g: v for g, v in out.items() if v}


def read_together(bootstrap: str, ports: list[int], topic: str, groups: dict[str, int | None],
                  records: int) -> None:
    """Groups with the default client id subscribe to a new topic and wait, Stable, for data.
    ``records`` are produced in steps; a group with a limit reads up to it (caught up: the broker
    fetched it no more than that), commits and leaves before the next step is produced; the others
    read everything. Each group's count, summed over ``ports``, is what it read."""
    readers = {g: Reader(bootstrap, g, topic, limit) for g, limit in groups.items()}
    for r in readers.values():
        r.start()
    for g, r in readers.items():
        assert r.assigned.wait(30), f"{g} got no assignment"
    time.sleep(1)  # long polls on the empty partitions
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    produced = 0
    for step in sorted({limit for limit in groups.values() if limit is not None} | {records}):
        for _ in range(step - produced):
            p.produce(topic, value=b"r" * 64)
        assert p.flush(30) == 0
        produced = step
        running = [r for r in readers.values() if r.is_alive()]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(r.read < step for r in running):
            time.sleep(0.1)
        for r in running:
            if r.limit == step:
                r.join(30)
    for r in readers.values():
        r.done.set()
        r.join(30)
    got = {g: r.read for g, r in readers.items()}
    assert got == {g: limit or records for g, limit in groups.items()}
    # counts are exact once the evidence (each group's commit) is in: at most a revision later
    want = {g: float(n) for g, n in got.items() if n}
    deadline = time.monotonic() + 10
    while group_counts(ports, topic) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    assert group_counts(ports, topic) == want
