"""``gregor topics`` and ``gregor groups`` run in process (cli.main) against an in-process broker:
what an operator reads and what a script parses. The same commands against a broker process and
other clusters: tests/integration/test_cli.py."""

from __future__ import annotations

import json

import pytest

from gregor.admin.client import AdminClient
from gregor.cli import main
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import java_string_hashcode, kafka_abs
from gregor.protocol.records import build_batch


def gregor(served, capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([*argv, "--bootstrap-server", served.bootstrap])
    out, err = capsys.readouterr()
    return rc, out, err


def gjson(served, capsys, *argv: str):
    rc, out, err = gregor(served, capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def produce(served, topic: str, partition: int, n: int) -> None:
    served.on_loop(lambda: served.node.services.logs.get(topic, partition).append(
        build_batch([(None, b"v")] * n)))


def commit(served, group: str, offsets: dict[tuple[str, int], int]) -> None:
    admin = AdminClient(served.bootstrap)
    try:
        topics: dict[str, list[dict]] = {}
        for (t, p), o in offsets.items():
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                             "committed_leader_epoch": -1, "committed_metadata": "meta"})
        r = admin.coordinator_conn(group).call(ApiKey.OFFSET_COMMIT, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        assert all(p.error_code == 0 for t in r.topics for p in t.partitions)
    finally:
        admin.close()


def test_topics_create_list_describe_delete(served_broker, capsys):
    s = served_broker
    rc, out, _ = gregor(s, capsys, "topics", "create", "t", "--partitions", "2", "--config", "retention.ms=60000")
    assert (rc, out) == (0, "TOPIC  RESULT\nt      created\n")
    rc, _, err = gregor(s, capsys, "topics", "create", "t")
    assert rc == 1 and err.startswith("gregor topics: cannot create 't': TOPIC_ALREADY_EXISTS")
    rc, _, err = gregor(s, capsys, "topics", "create", "u", "--config", "retention.ms")
    assert rc == 1 and "expected KEY=VALUE" in err
    produce(s, "t", 1, 3)
    rc, out, _ = gregor(s, capsys, "topics", "list")
    assert out == "__consumer_offsets\nt\n"
    assert gjson(s, capsys, "topics", "list", "--exclude-internal") == ["t"]
    topic_id = s.on_loop(lambda: str(s.node.services.topics.get("t").topic_id))
    rc, out, _ = gregor(s, capsys, "topics", "describe", "t")
    assert out == (f"Topic: t\tTopicId: {topic_id}\tPartitionCount: 2\tInternal: false\tConfigs: retention.ms=60000\n"
                   "PARTITION  LEADER  REPLICAS  ISR  LOG_START_OFFSET  LOG_END_OFFSET\n"
                   "0          0       [0]       [0]  0                 0\n"
                   "1          0       [0]       [0]  0                 3\n\n")
    assert gjson(s, capsys, "topics", "describe", "t") == [{
        "topic": "t", "topic_id": topic_id, "partitions": 2, "internal": False, "configs": {"retention.ms": "60000"},
        "partition_details": [
            {"partition": 0, "leader": 0, "replicas": [0], "isr": [0], "log_start_offset": 0, "log_end_offset": 0},
            {"partition": 1, "leader": 0, "replicas": [0], "isr": [0], "log_start_offset": 0, "log_end_offset": 3}]}]
    rc, _, err = gregor(s, capsys, "topics", "describe", "missing")
    assert rc == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    assert gjson(s, capsys, "topics", "delete", "t") == [{"topic": "t", "result": "deleted"}]
    rc, _, err = gregor(s, capsys, "topics", "delete", "t")
    assert rc == 1 and "cannot delete 't': UNKNOWN_TOPIC_OR_PARTITION" in err


def test_groups_describe_shows_offsets_and_lag(served_broker, capsys):
    s = served_broker
    s.on_loop(lambda: s.node.services.topics.create_topic("events", 2, {}))
    produce(s, "events", 0, 10)
    produce(s, "events", 1, 4)
    commit(s, "billing", {("events", 0): 7, ("events", 1): 4})
    assert gjson(s, capsys, "groups", "list") == [
        {"group": "billing", "type": "classic", "state": "Empty", "protocol_type": "", "coordinator": 0}]
    described = gjson(s, capsys, "groups", "describe", "billing")
    assert (described["state"], described["members"]) == ("Empty", [])
    assert [(r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["consumer_id"])
            for r in described["offsets"]] == [("events", 0, 7, 10, 3, None), ("events", 1, 4, 4, 0, None)]
    rc, out, _ = gregor(s, capsys, "groups", "describe", "billing")
    assert out.splitlines()[0] == "Group billing is Empty (0 members, protocol -/-)"
    assert out.splitlines()[2].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT_OFFSET", "LOG_END_OFFSET", "LAG",
                                           "CONSUMER_ID", "HOST", "CLIENT_ID"]
    assert out.splitlines()[3].split() == ["billing", "events", "0", "7", "10", "3", "-", "-", "-"]


def test_groups_reset_offsets_plan_then_execute(served_broker, capsys):
    s = served_broker
    s.on_loop(lambda: s.node.services.topics.create_topic("events", 2, {}))
    produce(s, "events", 0, 10)
    produce(s, "events", 1, 4)
    commit(s, "billing", {("events", 0): 7, ("events", 1): 4})

    def plan(*how: str, execute: bool = False) -> list[tuple[int, int | None, int]]:
        rows = gjson(s, capsys, "groups", "reset-offsets", "billing", "--topic", "events", *how,
                     *(["--execute"] if execute else []))
        return [(r["partition"], r["previous_offset"], r["new_offset"]) for r in rows]

    assert plan("--to-earliest") == [(0, 7, 0), (1, 4, 0)]
    assert plan("--shift-by", "-5") == [(0, 7, 2), (1, 4, 0)]  # clamped to the log start
    assert plan("--to-offset", "99") == [(0, 7, 10), (1, 4, 4)]  # clamped to the log end
    assert gjson(s, capsys, "groups", "describe", "billing")["offsets"][0]["current_offset"] == 7  # a plan only
    rc, out, _ = gregor(s, capsys, "groups", "reset-offsets", "billing", "--topic", "events:0", "--to-latest")
    assert out.startswith("Dry run: nothing committed (add --execute to apply)\n")
    assert plan("--shift-by", "-5", execute=True) == [(0, 7, 2), (1, 4, 0)]
    assert [(r["partition"], r["current_offset"], r["lag"])
            for r in gjson(s, capsys, "groups", "describe", "billing")["offsets"]] == [(0, 2, 8), (1, 0, 4)]


def test_groups_delete_offsets_and_delete(served_broker, capsys):
    s = served_broker
    s.on_loop(lambda: s.node.services.topics.create_topic("events", 2, {}))
    commit(s, "billing", {("events", 0): 1, ("events", 1): 1})
    assert gjson(s, capsys, "groups", "delete-offsets", "billing", "--topic", "events:1") == [
        {"topic": "events", "partition": 1, "result": "deleted"}]
    assert [r["partition"] for r in gjson(s, capsys, "groups", "describe", "billing")["offsets"]] == [0]
    assert gjson(s, capsys, "groups", "delete", "billing") == [{"group": "billing", "result": "deleted"}]
    assert gjson(s, capsys, "groups", "list") == []


@pytest.mark.parametrize("group", ["billing", "console-consumer-12345"])
def test_groups_coordinator_explains_placement(served_broker, capsys, group):
    s = served_broker
    info = gjson(s, capsys, "groups", "coordinator", group)
    h = java_string_hashcode(group)
    assert {k: info[k] for k in ("group", "java_hashcode", "abs_hashcode", "offsets_topic_partitions", "partition",
                                 "partition_leader", "partition_leader_address", "coordinator", "status")} == {
        "group": group, "java_hashcode": h, "abs_hashcode": kafka_abs(h), "offsets_topic_partitions": 3,
        "partition": kafka_abs(h) % 3, "partition_leader": 0, "partition_leader_address": s.bootstrap,
        "coordinator": 0, "status": "loaded"}
    rc, out, _ = gregor(s, capsys, "groups", "coordinator", group)
    assert rc == 0 and f"{'partition':26s} {kafka_abs(h) % 3}\n" in out
