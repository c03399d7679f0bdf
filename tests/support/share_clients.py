"""Share consumers (confluent-kafka's ShareConsumer) for the share-group tests: topics, records,
a consumer in implicit or explicit acknowledgement mode, polling, and a group's offset reset."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: it is the futures' handle
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


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


def start_group_at_earliest(broker: Any, group: str) -> None:
    """share.auto.offset.reset=earliest for the group (IncrementalAlterConfigs on GROUP)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
