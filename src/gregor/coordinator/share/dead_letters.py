"""Dead-letter topics for share groups (KIP-1191): a record a consumer rejected, or delivered
``share.delivery.count.limit`` times without being accepted, is copied to the group's dead-letter
topic (group config ``errors.deadletterqueue.topic.name``) before it is archived.

The rules, checked before every copy as Kafka does (the configs are dynamic):

1. the group names a topic, and the name does not start with ``__``;
2. a topic that exists allows it: topic config ``errors.deadletterqueue.group.enable=true``;
3. a topic that does not exist is created only with the broker's
   ``errors.deadletterqueue.auto.create.topics.enable=true`` (with that topic config set, and
   ``message.timestamp.type=CreateTime``);
4. the name starts with the broker's ``errors.deadletterqueue.topic.name.prefix`` (``dlq.``), unless
   that is empty.

A copy is one record per source offset, written to partition ``source partition % partitions``
of the dead-letter topic, timestamped when it is written, with Kafka's six headers
(``__dlq.errors.topic``, ``.partition``, ``.offset``, ``.group``, ``.delivery.count``, ``.message``)
and, with the group config ``errors.deadletterqueue.copy.record.enable=true``, the source record's
key and value (its headers are not copied). Written with acks=all in batches within the topic's
``max.message.bytes``; a failed write is tried again (5 attempts, backoff from 1 s doubling up to
30 s). A copy that cannot be made is logged and counted, and the record is archived all the same:
a dead-letter topic is a place to look at failures, never a reason for a share group to stop.
A leader that fails between the copy and the archiving write makes the next leader copy the
records again (at least once, as Kafka)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from gregor.coordinator.share.share_partition import DeadLetter
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import (
    decode_records,
    encode_headers,
    encode_record,
    frame_batch,
    iter_batches,
    iter_key_values,
)
from gregor.replication.leader_producer import LeaderProducer

log = logging.getLogger("gregor.coordinator.share")

ENABLE = "errors.deadletterqueue.group.enable"
HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
ATTEMPTS = 5
BACKOFF_S = 1.0
BACKOFF_MAX_S = 30.0
READ_BYTES = 1024 * 1024
BATCH_OVERHEAD = 61
CONTROL_FLAG = 0x20


class DeadLetterFailed(Exception):
    """The copy cannot be made (a rule, or every attempt failed); the message says why."""


def _true(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"


class DeadLetterWriter:
    def __init__(self, config: Any, registry: TopicRegistry, create_topic: Callable[..., Any],
                 producer: LeaderProducer, backoff_s: float = BACKOFF_S, attempts: int = ATTEMPTS) -> None:
        self.config = config
        self.registry = registry
        self.create_topic = create_topic
        self.producer = producer
        self.backoff_s = backoff_s
        self.attempts = attempts

    def problem(self, group: str, name: str) -> str | None:
        """Why ``name`` cannot take ``group``'s dead letters now (None: it can)."""
        if not name:
            return f"the dead-letter topic of share group {group} is not set"
        if name.startswith("__"):
            return f"the dead-letter topic {name} of share group {group} starts with __"
        topic = self.registry.get(name)
        if topic is not None and not _true(topic.configs.get(ENABLE)):
            return f"topic {name}, the dead-letter topic of share group {group}, does not have {ENABLE}=true"
        if topic is None and not self.config["errors.deadletterqueue.auto.create.topics.enable"]:
            return (f"the dead-letter topic {name} of share group {group} does not exist and "
                    "errors.deadletterqueue.auto.create.topics.enable is false")
        prefix = str(self.config["errors.deadletterqueue.topic.name.prefix"])
        if prefix and not name.startswith(prefix):
            return (f"the dead-letter topic {name} of share group {group} does not start with {prefix!r} "
                    "(errors.deadletterqueue.topic.name.prefix)")
        return None

    async def write(self, group: str, topic: str, partition: int, plog: Any, letter: DeadLetter, target: str,
                    copy_record: bool) -> None:
        """Copy ``letter``'s offsets to ``target``; raises DeadLetterFailed when it cannot."""
        sources = self._sources(plog, letter) if copy_record else {}
        progress = [letter.first_offset]  # the next offset to write: kept across attempts
        delay, last_error = self.backoff_s, ""
        for attempt in range(1, self.attempts + 1):
            problem = self.problem(group, target)
            if problem is not None:
                raise DeadLetterFailed(problem)
            try:
                await self._write_from(group, topic, partition, letter, target, sources, progress)
                return
            except KafkaError as e:
                last_error = e.message or e.code.name
            if attempt < self.attempts:
                log.info("share group %s: dead letters of %s-%d (offsets %d-%d) not written to %s yet (%s); "
                         "trying again in %.1f s", group, topic, partition, progress[0], letter.last_offset, target,
                         last_error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
        raise DeadLetterFailed(f"{self.attempts} attempts to write to {target} failed; the last: {last_error}")

    async def _write_from(self, group: str, topic: str, partition: int, letter: DeadLetter, target: str,
                          sources: dict[int, tuple[bytes | None, bytes | None]], progress: list[int]) -> None:
        """Write from ``progress[0]`` to the letter's end, a batch at a time (``progress`` moves
        past each batch written); KafkaError when a write fails."""
        dlq = self.registry.get(target)
        if dlq is None:
            self._create(target)
            dlq = self.registry.get(target)
            if dlq is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{target} is being created")
        dlq_partition = partition % dlq.partitions
        limit = int(dlq.configs.get("max.message.bytes") or self.config["message.max.bytes"])
        # every dead letter of the letter has the same headers but its offset: encoded once
        before = encode_headers([(HEADER_TOPIC, topic.encode()), (HEADER_PARTITION, str(partition).encode())])
        after = encode_headers([(HEADER_GROUP, group.encode()), (HEADER_DELIVERY_COUNT,
                                                                 str(letter.delivery_count).encode()),
                                (HEADER_MESSAGE, letter.cause.encode())])
        while progress[0] <= letter.last_offset:
            now = int(time.time() * 1000)
            body = bytearray()
            count = 0
            offset = progress[0]
            while offset <= letter.last_offset:
                key, value = sources.get(offset, (None, None))
                record = bytearray()
                headers = before + encode_headers([(HEADER_OFFSET, str(offset).encode())]) + after
                encode_record(record, count, 0, key, value, encoded_headers=(6, headers))
                if count and BATCH_OVERHEAD + len(body) + len(record) > limit:
                    break
                body += record
                count += 1
                offset += 1
            batch = frame_batch(bytes(body), count, count - 1, now, now)
            code, message = await self.producer.produce(target, dlq_partition, batch, acks=-1)
            if code != ErrorCode.none:
                raise KafkaError(code, message)
            progress[0] = offset

    def _create(self, name: str) -> None:
        try:
            self.create_topic(name, int(self.config["num.partitions"]),
                              {ENABLE: "true", "message.timestamp.type": "CreateTime"})
            log.info("created dead-letter topic %s", name)
        except KafkaError as e:
            if e.code != ErrorCode.topic_already_exists:
                raise

    @staticmethod
    def _sources(plog: Any, letter: DeadLetter) -> dict[int, tuple[bytes | None, bytes | None]]:
        """Key and value of the letter's offsets still in the log (per record: this is the one
        place share delivery decodes records)."""
        out: dict[int, tuple[bytes | None, bytes | None]] = {}
        offset = max(letter.first_offset, plog.log_start_offset)
        while offset <= letter.last_offset:
            data = plog.read(offset, READ_BYTES, min_one_batch=True).records
            nxt = offset
            for h in iter_batches(data):
                if not h.attributes & CONTROL_FLAG and h.last_offset >= offset:
                    pairs: Iterable[tuple[int, tuple[bytes | None, bytes | None]]]
                    if h.records_count == h.last_offset_delta + 1:  # every offset there: no offsets to decode
                        pairs = enumerate(iter_key_values(data, h), h.base_offset)
                    else:  # compacted
                        pairs = ((r.offset, (r.key, r.value)) for r in decode_records(data, h))
                    for o, kv in pairs:
                        if offset <= o <= letter.last_offset:
                            out[o] = kv
                nxt = h.last_offset + 1
                if nxt > letter.last_offset:
                    break
            if nxt <= offset:
                break
            offset = nxt
        return out
