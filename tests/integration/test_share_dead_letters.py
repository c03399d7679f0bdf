"""Dead-letter topics for share groups (KIP-1191) with confluent-kafka's ShareConsumer against a
real broker: what a consumer rejects, and what is delivered ``share.delivery.count.limit`` times
without being accepted, is copied to the group's dead-letter topic (Kafka's headers, the key and
value when the group asks, partition = source partition % partitions) and then archived; a
topic that does not allow it gets nothing and the records are archived all the same; the names
are checked; the topic is created when the broker allows it."""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from tests.support.broker_process import free_port
from tests.support.metrics_scrape import scrape
from tests.support.share_clients import (
    DLQ,
    consume_by_pattern,
    create,
    produce,
    read_all,
    set_group_configs,
    start_group_at_earliest,
)

pytestmark = pytest.mark.timeout(240)

def metric_sum(samples: dict, name: str, group: str) -> float:  # type: ignore[type-arg]
    return sum(v for labels, v in samples.get(name, []) if labels.get("group") == group)


def test_rejected_and_too_often_delivered_records_are_copied_to_the_dead_letter_topic(broker_factory):
    port = free_port()
    b = broker_factory(group_share_delivery_count_limit="2", **{"metrics.listener": f"http://127.0.0.1:{port}"})
    create(b.bootstrap, "payments", partitions=3)
    create(b.bootstrap, "dlq.payments", partitions=2, configs=DLQ)
    start_group_at_earliest(b, "billing", **{"errors.deadletterqueue.topic.name": "dlq.payments",
                                             "errors.deadletterqueue.copy.record.enable": "true"})
    produce(b.bootstrap, "payments", [f"v{i}" for i in range(30)])
    A = ck.AcknowledgeType
    deliveries = consume_by_pattern(b.bootstrap, "billing", "payments", {0: A.REJECT, 1: A.RELEASE, 2: A.ACCEPT}, 30)
    assert all(deliveries[i] == [1, 2] for i in range(1, 30, 3)), "released records come back up to the limit"
    assert all(deliveries[i] == [1] for i in range(30) if i % 3 != 1)

    letters = read_all(b.bootstrap, "dlq.payments", 20)
    assert len(letters) == 20, "one dead letter for each rejected or too often delivered record, no more"
    seen = {}
    for m in letters:
        h = {k: v.decode() for k, v in m.headers()}
        assert h["__dlq.errors.topic"] == "payments" and h["__dlq.errors.group"] == "billing"
        assert m.partition() == int(h["__dlq.errors.partition"]) % 2, "source partition % dead-letter partitions"
        i = int(m.key())
        assert m.value() == f"v{i}".encode(), "the key and value copied"
        seen[i] = (h["__dlq.errors.delivery.count"], h["__dlq.errors.message"])
        assert m.timestamp()[0] == ck.TIMESTAMP_CREATE_TIME
    assert seen == {i: ("1", "Offset rejected by client.") if i % 3 == 0
                    else ("2", "Offset delivery count exceeded the threshold.") for i in range(30) if i % 3 != 2}

    _, samples = scrape(port)
    assert metric_sum(samples, "gregor_share_partition_dead_lettered_total", "billing") == 20
    assert metric_sum(samples, "gregor_share_partition_dead_letter_failures_total", "billing") == 0
    assert metric_sum(samples, "gregor_share_partition_lag", "billing") == 0, "then archived: the start moved on"
    assert metric_sum(samples, "gregor_share_partition_end_offset", "billing") == 30


def test_a_topic_that_does_not_allow_it_gets_nothing_and_the_records_are_archived_all_the_same(broker_factory):
    port = free_port()
    b = broker_factory(**{"metrics.listener": f"http://127.0.0.1:{port}"})
    create(b.bootstrap, "jobs")
    create(b.bootstrap, "dlq.closed")  # without errors.deadletterqueue.group.enable
    start_group_at_earliest(b, "g", **{"errors.deadletterqueue.topic.name": "dlq.closed"})
    produce(b.bootstrap, "jobs", [f"j{i}" for i in range(5)])
    consume_by_pattern(b.bootstrap, "g", "jobs", {0: ck.AcknowledgeType.REJECT}, 5)
    assert read_all(b.bootstrap, "dlq.closed", 1, timeout=5) == []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, samples = scrape(port)
        if metric_sum(samples, "gregor_share_partition_dead_letter_failures_total", "g") == 5:
            break
        time.sleep(0.5)
    assert metric_sum(samples, "gregor_share_partition_dead_letter_failures_total", "g") == 5
    assert metric_sum(samples, "gregor_share_partition_start_offset", "g") == 5, "archived all the same"
    assert "does not have errors.deadletterqueue.group.enable=true" in b.output()


@pytest.mark.parametrize("name", ["payments-dlq", "__dlq.x", "dlq.bad name"])
def test_names_the_cluster_does_not_allow_are_refused(broker_factory, name):
    b = broker_factory()
    with pytest.raises(ck.KafkaException) as e:
        set_group_configs(b.bootstrap, "g", {"errors.deadletterqueue.topic.name": name})
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG


def test_the_topic_is_created_when_the_broker_allows_it_and_records_carry_headers_only(broker_factory):
    b = broker_factory(errors_deadletterqueue_auto_create_topics_enable="true")
    create(b.bootstrap, "events")
    start_group_at_earliest(b, "g", **{"errors.deadletterqueue.topic.name": "dlq.events"})
    produce(b.bootstrap, "events", [f"e{i}" for i in range(4)])
    consume_by_pattern(b.bootstrap, "g", "events", {0: ck.AcknowledgeType.REJECT}, 4)
    letters = read_all(b.bootstrap, "dlq.events", 4)
    assert sorted(int(dict(m.headers())["__dlq.errors.offset"]) for m in letters) == [0, 1, 2, 3]
    assert all(m.value() is None and m.key() is None for m in letters), "copy.record.enable is false by default"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "dlq.events")])
    described = next(iter(configs.values())).result(30)
    assert described["errors.deadletterqueue.group.enable"].value == "true"
