"""Share consumers (confluent-kafka's ShareConsumer) for the share-group tests: topics, records,
a consumer in implicit or explicit acknowledgement mode, polling, and a group's offset reset."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: it is the futures' handle
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(30)


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), key=str(i).encode())
    assert p.flush(30) == 0


@contextmanager
def share_consumer(bootstrap: str, group: str, topic: str, explicit: bool = False,
                   max_records: int = 500) -> Iterator[ck.ShareConsumer]:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": max_records}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ck.ShareConsumer(conf)
    c.subscribe([topic])
    try:
        yield c
    finally:
        c.close()


def poll_values(c: ck.ShareConsumer, until: float, want: int | None = None) -> list[ck.Message]:
    out: list[ck.Message] = []
    while time.monotonic() < until and (want is None or len(out) < want):
        for m in c.poll(0.5):
            assert m.error() is None, m.error()
            out.append(m)
    return out


def start_group_at_earliest(broker: Any, group: str, **configs: str) -> None:
    """share.auto.offset.reset=earliest for the group, and ``configs`` (IncrementalAlterConfigs on
    GROUP)."""
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest", **configs})


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Raises the admin client's KafkaException when the broker refuses them."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)


DLQ = {"errors.deadletterqueue.group.enable": "true"}  # the topic config of a dead-letter topic


def consume_by_pattern(bootstrap: str, group: str, topic: str, pattern: dict[int, ck.AcknowledgeType], n: int,
                       timeout: float = 90) -> dict[int, list[int]]:
    """Acknowledge record i (its key) with pattern[i % len(pattern)] until every one of the ``n``
    was accepted or rejected, or was released as often as the limit allows (three quiet seconds);
    returns each key's delivery counts."""
    deliveries: dict[int, list[int]] = {}
    with share_consumer(bootstrap, group, topic, explicit=True) as c:
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            msgs = [m for m in c.poll(0.5) if m.error() is None]
            for m in msgs:
                i = int(m.key())
                deliveries.setdefault(i, []).append(m.delivery_count())
                c.acknowledge(m, pattern[i % len(pattern)])
            if msgs:
                c.commit_sync()
                quiet_since = None
            elif len(deliveries) == n:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 3:
                    break
    return deliveries


def read_all(bootstrap: str, topic: str, want: int, timeout: float = 60) -> list[ck.Message]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}-{time.monotonic_ns()}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[ck.Message] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(out) < want:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m)
        if len(out) == want:  # and nothing more comes
            end = time.monotonic() + 2
            while time.monotonic() < end:
                m = c.poll(0.3)
                if m is not None and m.error() is None:
                    out.append(m)
    finally:
        c.close()
    return out
