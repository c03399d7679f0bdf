"""The dead-letter writer (coordinator/share/dead_letters.py) without a network: Kafka's headers and
order, key and value copied only when asked, the partition (source % partitions), batches within
the topic's max.message.bytes, retries that go on from the batch that failed, the rules in
Kafka's order, and giving up after the attempts."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from gregor.coordinator.share.dead_letters import DeadLetterFailed, DeadLetterWriter
from gregor.coordinator.share.share_partition import LIMIT_REACHED, REJECTED, DeadLetter
from gregor.log.partition_log import ReadResult
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch, decode_records, iter_batches


@dataclass
class Topic:
    partitions: int
    configs: dict[str, Any] = field(default_factory=dict)


class Registry:
    def __init__(self, **topics: Topic) -> None:
        self.topics = {k.replace("_", "."): v for k, v in topics.items()}

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)


class Producer:
    def __init__(self, fail: list[ErrorCode] | None = None) -> None:
        self.sent: list[tuple[str, int, bytes, int]] = []
        self.fail = list(fail or [])

    async def produce(self, topic: str, partition: int, batch: bytes, acks: int) -> tuple[ErrorCode, str | None]:
        if self.fail:
            return self.fail.pop(0), "no"
        self.sent.append((topic, partition, batch, acks))
        return ErrorCode.none, None


class Log:
    """Offsets 0-99 in batches of 10, key k<i>, value v<i> * 100."""

    log_start_offset = 0

    def __init__(self) -> None:
        self.batches = [build_batch([(b"k%d" % i, b"v%d" % i * 100) for i in range(b, b + 10)], base_offset=b)
                        for b in range(0, 100, 10)]

    def read(self, offset: int, max_bytes: int, min_one_batch: bool = True) -> ReadResult:
        out = [b for b in self.batches if int.from_bytes(b[:8], "big") + 9 >= offset]
        return ReadResult(b"".join(out[:3]), 100, 0)


CONFIG = {"errors.deadletterqueue.topic.name.prefix": "dlq.", "errors.deadletterqueue.auto.create.topics.enable": False,
          "message.max.bytes": 1_000_000, "num.partitions": 1}
ENABLED = {"errors.deadletterqueue.group.enable": "true"}


def writer(producer: Producer, registry: Registry | None = None, **config: Any) -> DeadLetterWriter:
    registry = registry or Registry(dlq_jobs=Topic(2, dict(ENABLED)))
    return DeadLetterWriter({**CONFIG, **config}, registry, lambda *a: None, producer, backoff_s=0.0)  # type: ignore[arg-type]


def letters(producer: Producer) -> list[tuple[int, dict[str, bytes], bytes | None, bytes | None]]:
    out = []
    for _t, partition, batch, acks in producer.sent:
        assert acks == -1
        for h in iter_batches(batch):
            for r in decode_records(batch, h):
                out.append((partition, dict(r.headers), r.key, r.value))
                assert [k for k, _ in r.headers] == ["__dlq.errors.topic", "__dlq.errors.partition",
                                                     "__dlq.errors.offset", "__dlq.errors.group",
                                                     "__dlq.errors.delivery.count", "__dlq.errors.message"]
    return out


def test_headers_key_value_and_partition():
    p = Producer()
    asyncio.run(writer(p).write("g", "jobs", 3, Log(), DeadLetter(5, 7, 2, REJECTED), "dlq.jobs", True))
    got = letters(p)
    assert [(part, h["__dlq.errors.offset"], k) for part, h, k, _v in got] == [
        (1, b"5", b"k5"), (1, b"6", b"k6"), (1, b"7", b"k7")]  # partition 3 % 2
    _part, h, _k, v = got[0]
    assert v == b"v5" * 100
    assert (h["__dlq.errors.topic"], h["__dlq.errors.partition"], h["__dlq.errors.group"],
            h["__dlq.errors.delivery.count"], h["__dlq.errors.message"]) == (
        b"jobs", b"3", b"g", b"2", REJECTED.encode())


def test_without_copy_only_headers_and_batches_within_max_message_bytes():
    p = Producer()
    registry = Registry(dlq_jobs=Topic(1, {**ENABLED, "max.message.bytes": 600}))
    asyncio.run(writer(p, registry).write("g", "jobs", 0, Log(), DeadLetter(0, 39, 5, LIMIT_REACHED), "dlq.jobs",
                                          False))
    got = letters(p)
    assert [int(h["__dlq.errors.offset"]) for _p, h, _k, _v in got] == list(range(40))
    assert all(k is None and v is None for _p, _h, k, v in got)
    assert len(p.sent) > 1 and all(len(batch) <= 600 for _t, _p, batch, _a in p.sent)


def test_a_failed_write_is_tried_again_from_the_batch_that_failed():
    p = Producer()
    registry = Registry(dlq_jobs=Topic(1, {**ENABLED, "max.message.bytes": 600}))
    w = writer(p, registry)
    real = p.produce
    calls = 0

    async def flaky(*args: Any, **kw: Any) -> tuple[ErrorCode, str | None]:
        nonlocal calls
        calls += 1
        if calls in (2, 3):  # the second batch fails twice
            return ErrorCode.not_leader_or_follower, "moved"
        return await real(*args, **kw)

    p.produce = flaky  # type: ignore[method-assign]
    asyncio.run(w.write("g", "jobs", 0, Log(), DeadLetter(0, 39, 1, REJECTED), "dlq.jobs", False))
    assert [int(h["__dlq.errors.offset"]) for _p, h, _k, _v in letters(p)] == list(range(40)), "each once, in order"


def test_giving_up_after_the_attempts():
    p = Producer(fail=[ErrorCode.not_enough_replicas] * 5)
    with pytest.raises(DeadLetterFailed, match="5 attempts"):
        asyncio.run(writer(p).write("g", "jobs", 0, Log(), DeadLetter(0, 0, 1, REJECTED), "dlq.jobs", False))
    assert p.sent == []


@pytest.mark.parametrize(("name", "registry", "config", "why"), [
    ("", Registry(), {}, "is not set"),
    ("__dlq", Registry(), {}, "starts with __"),
    ("dlq.closed", Registry(dlq_closed=Topic(1)), {}, "does not have errors.deadletterqueue.group.enable=true"),
    ("dlq.missing", Registry(), {}, "does not exist and errors.deadletterqueue.auto.create.topics.enable is false"),
    ("other", Registry(other=Topic(1, dict(ENABLED))), {}, "does not start with 'dlq.'"),
    ("other", Registry(other=Topic(1, dict(ENABLED))), {"errors.deadletterqueue.topic.name.prefix": ""}, None),
    ("dlq.missing", Registry(), {"errors.deadletterqueue.auto.create.topics.enable": True}, None),
])
def test_the_rules(name, registry, config, why):
    problem = writer(Producer(), registry, **config).problem("g", name)
    assert (problem is None) if why is None else (why in (problem or "")), problem
