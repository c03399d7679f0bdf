"""Driving and checking the exactly-once processor (tests/support/eos_processor.py): the input fed
at a pace, the processor SIGKILLed and started again with the same transactional id, and the
check that the read_committed output holds each input record exactly once and the group's
committed offsets equal the input's end. Used on one node and on three brokers."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
INPUT = 3000
PARTITIONS = 3


def create(bootstrap: str, name: str, partitions: int, rf: int = 1) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, rf)])[name].result(30)


def produce_input(bootstrap: str, topic: str, count: int, per_second: float = 100) -> None:
    """The input, at a pace: the processor is killed while input still arrives."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    started = time.monotonic()
    for i in range(count):
        p.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
        if i % 25 == 0:
            p.poll(0)
            ahead = started + i / per_second - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    assert p.flush(60) == 0


class Processor:
    """The processor's process; ``start`` again after ``kill``."""

    def __init__(self, bootstrap: str, group: str, in_topic: str, out_topic: str, tid: str, log: Path) -> None:
        self.args = [sys.executable, "-m", "tests.support.eos_processor", bootstrap, group, in_topic, out_topic, tid]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Processor:
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=open(self.log, "ab"),  # noqa: SIM115
                                     stderr=subprocess.STDOUT)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return sum(max(tp.offset, 0) for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10))
    finally:
        c.close()


def read_output(bootstrap: str, topic: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[str] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                eof.add(m.partition())
                continue
            eof.discard(m.partition())
            out.append(m.value().decode())
    finally:
        c.close()
    return out


def check_exactly_once(bootstrap: str, group: str, out_topic: str, in_topic: str) -> None:
    out = read_output(bootstrap, out_topic)
    values = [o.split(":", 3)[3] for o in out]
    dups = len(values) - len(set(values))
    missing = {f"v{i}" for i in range(INPUT)} - set(values)
    assert dups == 0 and not missing, f"{dups} duplicates, {len(missing)} missing (e.g. {sorted(missing)[:5]})"
    assert committed_total(bootstrap, group, in_topic) == INPUT


def run_with_kills(bootstrap: str, tmp_path: Path, kills: int, fault: object = None, seed: int = 1) -> None:
    """Produce the input, run the processor, SIGKILL it ``kills`` times at random moments (and run
    ``fault(i)`` after each kill), then let it finish; check exactly-once."""
    rnd = random.Random(seed)
    create(bootstrap, "in", PARTITIONS, 3 if fault else 1)
    create(bootstrap, "out", PARTITIONS, 3 if fault else 1)
    feeder = threading.Thread(target=produce_input, args=(bootstrap, "in", INPUT), daemon=True)
    feeder.start()
    proc = Processor(bootstrap, "eos", "in", "out", "eos-1", tmp_path / "processor.log")
    try:
        for i in range(kills):
            proc.start()
            done_before = committed_total(bootstrap, "eos", "in")
            if done_before >= INPUT:
                break  # everything processed already: the last start below checks the end
            # kill it while it is working: after it committed at least one more transaction (the
            # group first waits for the killed instance's session to time out)
            wait_for(lambda before=done_before: committed_total(bootstrap, "eos", "in") > before
                     or not proc.alive(), 60, "the processor to commit a transaction")
            time.sleep(rnd.uniform(0.0, 1.0))
            proc.kill()
            if callable(fault):
                fault(i)
        proc.start()
        feeder.join(120)
        wait_for(lambda: committed_total(bootstrap, "eos", "in") >= INPUT, 120,
                 f"the processor to consume all {INPUT} records")
    finally:
        proc.kill()
    check_exactly_once(bootstrap, "eos", "out", "in")
