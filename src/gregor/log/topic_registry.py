"""Topic registry: names, topic ids, partition counts, per-topic config overrides, internal flag.

Persisted as ``<log.dirs>/gregor-topics.json`` (atomic rewrite on each change); each partition
directory also gets Kafka's ``partition.metadata`` file naming its topic id.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gregor.atomic_file import write_atomically
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})


def validate_topic_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.invalid_topic_exception, "topic name is empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"topic name is {len(name)} characters, the limit is {MAX_NAME_LENGTH}")
    if not _LEGAL.fullmatch(name):
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"topic name {name!r} may only contain ASCII letters, digits, '.', '_' and '-'")


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, Any] = field(default_factory=dict)
    internal: bool = False


class TopicRegistry:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "gregor-topics.json"
        self.by_name: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        data = json.loads(self.path.read_text())
        for t in data["topics"]:
            topic = Topic(t["name"], uuid.UUID(t["id"]), t["partitions"], t.get("configs", {}),
                          t.get("internal", False))
            self._index(topic)

    def save(self) -> None:
        data = {"version": 1, "topics": [
            {"name": t.name, "id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs,
             "internal": t.internal}
            for t in sorted(self.by_name.values(), key=lambda t: t.name)
        ]}
        write_atomically(self.path, json.dumps(data, indent=1).encode())

    def _index(self, topic: Topic) -> None:
        self.by_name[topic.name] = topic
        self.by_id[topic.topic_id] = topic

    def add(self, name: str, partitions: int, configs: dict[str, Any], internal: bool = False) -> Topic:
        topic = Topic(name, uuid.uuid4(), partitions, dict(configs), internal or name in INTERNAL_TOPICS)
        self._index(topic)
        self.save()
        return topic

    def new_topic(self, name: str, partitions: int, configs: dict[str, Any], internal: bool = False) -> Topic:
        """A topic not registered yet (``add_topic`` registers it once its files exist)."""
        return Topic(name, uuid.uuid4(), partitions, dict(configs), internal or name in INTERNAL_TOPICS)

    def add_topic(self, topic: Topic) -> None:
        """Register and save; if saving fails (OSError) the topic is not registered."""
        self._index(topic)
        try:
            self.save()
        except OSError:
            self.forget(topic.name)
            raise

    def remove(self, name: str) -> Topic:
        topic = self.forget(name)
        self.save()
        return topic

    def forget(self, name: str) -> Topic:
        """Drop a topic in memory only (deletion saves later, see LogManager.delete_logs)."""
        topic = self.by_name.pop(name)
        self.by_id.pop(topic.topic_id, None)
        return topic

    def get(self, name: str) -> Topic | None:
        return self.by_name.get(name)


def write_partition_metadata(directory: Path, topic_id: uuid.UUID, durable: bool = True) -> None:
    """Kafka's ``partition.metadata``: the topic id, base64 without padding as Kafka prints it.

    ``durable=False`` (partitions created in bulk) writes it without fsync: the registry, not this
    file, says which topic a directory belongs to, and the file is written again at start-up when
    missing."""
    encoded = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    data = f"version: 0\ntopic_id: {encoded}\n".encode()
    if durable:
        write_atomically(directory / "partition.metadata", data)
    else:
        (directory / "partition.metadata").write_bytes(data)
