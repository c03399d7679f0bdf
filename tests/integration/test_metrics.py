"""Consumption metrics attributed to groups from the coordinator's own state, against ground
truth: consumers in known groups read known amounts; the metrics equal what they read."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import free_port
from tests.support.group_readers import read_together
from tests.support.metrics_scrape import scrape


def consume(bootstrap, group, topic, n, assign=None, client_id="rdkafka"):
    conf = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "group.id": group or "unused", "client.id": client_id}
    c = Consumer(conf)
    if assign is not None:
        c.assign([TopicPartition(topic, p, 0) for p in assign])
    else:
        c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(n - got, 0.5) if m.error() is None)
    if assign is None:
        c.commit(asynchronous=False)
    return c, got


def test_fetches_are_attributed_to_their_groups(broker_factory):
    port = free_port()
    b = broker_factory(**{"metrics.listener": f"http://127.0.0.1:{port}", "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for t in ("alpha", "beta"):
        admin.create_topics([NewTopic(t, 2)])[t].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(300):
        p.produce("alpha", value=b"a" * 100, partition=i % 2)
    for i in range(200):
        p.produce("beta", value=b"b" * 50, partition=i % 2)
    p.flush(10)

    c1, n1 = consume(b.bootstrap, "readers-a", "alpha", 300)
    c2, n2 = consume(b.bootstrap, "readers-b", "beta", 200)
    # no group membership; a different client id (with the same client id, host and partitions as
    # a member of readers-b its fetches could not be told apart on the wire: docs/metrics.md)
    c3, n3 = consume(b.bootstrap, None, "beta", 200, assign=[0, 1], client_id="adhoc-tool")
    assert (n1, n2, n3) == (300, 200, 200)
    text, s = scrape(port)
    consumed = {(lab["group"], lab["topic"]): 0.0 for lab, _ in s["gregor_group_consumed_messages_total"]}
    for lab, v in s["gregor_group_consumed_messages_total"]:
        consumed[(lab["group"], lab["topic"])] += v
    assert consumed == {("readers-a", "alpha"): 300, ("readers-b", "beta"): 200, ("__no_group__", "beta"): 200}
    assert all(lab["group"] for lab, _ in s["gregor_group_consumed_messages_total"])  # never an empty label
    lag = {(lab["group"], lab["topic"], lab["partition"]): v for lab, v in s["gregor_group_lag"]}
    assert lag[("readers-a", "alpha", "0")] == 0 and lag[("readers-b", "beta", "1")] == 0
    state = {lab["group"]: lab["state"] for lab, _ in s["gregor_group_state"]}
    assert state["readers-a"] == "Stable" and state["readers-b"] == "Stable"
    rebalances = {lab["group"]: v for lab, v in s["gregor_group_rebalances_total"]}
    assert rebalances["readers-a"] == 1 and rebalances["readers-b"] == 1
    assert {lab["group"] for lab, _ in s["gregor_group_last_rebalance_seconds"]} >= {"readers-a", "readers-b"}
    assert "gregor_request_seconds_count" in text and 'api="FETCH"' in text

    # more data after the commit shows up as lag; consuming it is attributed again
    for _ in range(50):
        p.produce("alpha", value=b"x", partition=0)
    p.flush(10)
    time.sleep(3)  # the log end history samples once a second
    _, s = scrape(port)
    lag = {(lab["group"], lab["topic"], lab["partition"]): v for lab, v in s["gregor_group_lag"]}
    assert lag[("readers-a", "alpha", "0")] == 50
    tlag = {(lab["group"], lab["topic"], lab["partition"]): v for lab, v in s["gregor_group_time_lag_seconds"]}
    assert 1.0 <= tlag[("readers-a", "alpha", "0")] <= 10.0  # the 50 new messages are a few seconds old
    assert tlag[("readers-a", "alpha", "1")] == 0.0
    got = 0
    deadline = time.monotonic() + 20
    while got < 50 and time.monotonic() < deadline:
        got += sum(1 for m in c1.consume(50 - got, 0.5) if m.error() is None)
    _, s = scrape(port)
    total_a = sum(v for lab, v in s["gregor_group_consumed_messages_total"] if lab["group"] == "readers-a")
    assert total_a == 350
    for c in (c1, c2, c3):
        c.close()


def test_attribution_holds_across_rebalances_and_restarts(broker_factory):
    port = free_port()
    b = broker_factory(**{"metrics.listener": f"http://127.0.0.1:{port}", "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("gamma", 2)])["gamma"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap})

    def produce(n):
        for i in range(n):
            p.produce("gamma", value=b"g", partition=i % 2)
        p.flush(10)

    def pump(consumers, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for c in consumers:
                c.consume(100, 0.1)
            for c in consumers:
                try:
                    c.commit(asynchronous=False)
                except Exception:  # noqa: BLE001 - nothing to commit yet / rebalancing
                    pass

    def labels():
        _, s = scrape(port)
        return {lab["group"] for lab, _ in s.get("gregor_group_consumed_messages_total", []) if lab["topic"] == "gamma"}

    conf = {"bootstrap.servers": b.bootstrap, "group.id": "workers", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "reconnect.backoff.max.ms": 200}
    produce(100)
    w1 = Consumer({**conf, "client.id": "w1"})
    w1.subscribe(["gamma"])
    pump([w1], 4)
    assert labels() == {"workers"}
    w2 = Consumer({**conf, "client.id": "w2"})  # a member joins: rebalance
    w2.subscribe(["gamma"])
    produce(100)
    pump([w1, w2], 6)
    assert labels() == {"workers"}
    b.restart()  # counters start again; the group is reloaded from __consumer_offsets
    produce(100)
    pump([w1, w2], 8)
    assert labels() == {"workers"}, "a fetch from a member was not attributed to its group after the restart"
    w2.close()  # a member leaves: rebalance
    produce(100)
    pump([w1], 6)
    assert labels() == {"workers"}
    w1.close()


def test_telemetry_topic_keeps_consumption_history(broker_factory):
    import json

    b = broker_factory(**{"telemetry.interval.ms": "500", "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("delta", 1)])["delta"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for _ in range(120):
        p.produce("delta", value=b"d")
    p.flush(10)
    c, n = consume(b.bootstrap, "tele", "delta", 120, client_id="tele-client")
    assert n == 120
    c.close()  # the group stops consuming (it keeps its committed offsets)
    time.sleep(1.5)
    for _ in range(30):  # produced after the commit: lag
        p.produce("delta", value=b"d")
    p.flush(10)
    time.sleep(1.5)
    reader = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "telemetry-reader", "enable.auto.commit": False})
    parts = admin.list_topics(timeout=10).topics["__gregor_telemetry"].partitions
    assert len(parts) == 16  # telemetry.topic.num.partitions
    reader.assign([TopicPartition("__gregor_telemetry", p, 0) for p in parts])
    rows, placed = [], []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        msgs = reader.consume(1000, 0.5)
        for m in msgs:
            if m.error() is None:
                rows.append(json.loads(m.value()))
                placed.append((rows[-1]["group"], m.partition(), m.timestamp()[1] == rows[-1]["ts"]))
        if not msgs and rows:
            break
    reader.close()
    # every record of a group in one partition, where Kafka's default partitioner puts the group name
    # (librdkafka's murmur2 partitioner is the judge), stamped with its ts
    keyed = Producer({"bootstrap.servers": b.bootstrap, "partitioner": "murmur2"})
    admin.create_topics([NewTopic("placement", 16)])["placement"].result(10)
    homes: dict[str, int] = {}
    for group in {g for g, _p, _t in placed}:
        keyed.produce("placement", key=group.encode(), value=b"", on_delivery=lambda e, m: homes.update(
            {m.key().decode(): m.partition()}))
    keyed.flush(10)
    assert all(p == homes[g] and stamped for g, p, stamped in placed), placed[:5]
    mine = [r for r in rows if r["group"] == "tele" and r["topic"] == "delta"]
    assert mine, rows[:3]
    assert {"ts", "broker", "broker_start", "messages", "bytes", "committed", "log_end", "lag", "time_lag_s",
            "state"} <= set(mine[-1])
    assert max(r["messages"] for r in mine) == 120 and mine[-1]["committed"] == 120
    assert mine[-1]["lag"] == 30 and mine[-1]["log_end"] == 150
    assert [r["ts"] for r in mine] == sorted(r["ts"] for r in mine)
    # the internal topic is protected like __consumer_offsets
    md = admin.list_topics(timeout=10)
    assert "__gregor_telemetry" in md.topics


def test_groups_sharing_a_client_id_are_told_apart(broker_factory):
    """librdkafka names every consumer 'rdkafka': three groups on one host read the same
    partitions at the same time from different committed offsets; each group's count is exact."""
    port = free_port()
    b = broker_factory(**{"metrics.listener": f"http://127.0.0.1:{port}", "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("shared", 2)])["shared"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(3000):
        p.produce("shared", value=b"s" * 64, partition=i % 2)
    p.flush(10)
    starts = {"g-early": 0, "g-middle": 600, "g-late": 1200}
    for group, start in starts.items():  # committed positions, written without fetching
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("shared", q, start) for q in (0, 1)], asynchronous=False)
        c.close()
    consumers = {g: Consumer({"bootstrap.servers": b.bootstrap, "group.id": g, "enable.auto.commit": False,
                              "message.max.bytes": 4096, "fetch.max.bytes": 4096,
                              "max.partition.fetch.bytes": 2048, "queued.max.messages.kbytes": 16})
                 for g in starts}
    for c in consumers.values():
        c.subscribe(["shared"])
    got = dict.fromkeys(starts, 0)
    want = {g: 2 * (1500 - s) for g, s in starts.items()}
    deadline = time.monotonic() + 60
    while got != want and time.monotonic() < deadline:
        for g, c in consumers.items():  # interleaved: small fetches from all three in turn
            got[g] += sum(1 for m in c.consume(50, 0.05) if m.error() is None)
    assert got == want
    _, s = scrape(port)
    consumed = dict.fromkeys(starts, 0.0)
    for lab, v in s["gregor_group_consumed_messages_total"]:
        consumed[lab["group"]] = consumed.get(lab["group"], 0.0) + v
    assert consumed == want
    for c in consumers.values():
        c.close()


def test_groups_with_the_default_client_id_starting_together_each_count_what_they_read(broker_factory):
    """The report: two groups on one host, librdkafka's default client id, a new topic, both Stable
    before the data: each read 3,000 and the broker said 6,000 for one and nothing for the other."""
    port = free_port()
    b = broker_factory(**{"metrics.listener": f"http://127.0.0.1:{port}", "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("fresh", 3)])["fresh"].result(10)
    read_together(b.bootstrap, [port], "fresh", {"orders-service": None, "audit-service": None}, 3000)


def test_groups_with_the_default_client_id_that_read_different_amounts_are_counted_apart(broker_factory):
    """Four groups start together at offset 0 of a new topic; two leave early (at different
    points, after committing): each group's count is what it read."""
    port = free_port()
    b = broker_factory(**{"metrics.listener": f"http://127.0.0.1:{port}", "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("mixed", 1)])["mixed"].result(10)
    read_together(b.bootstrap, [port], "mixed", {"a": None, "b": 700, "c": None, "d": 1500}, 3000)
