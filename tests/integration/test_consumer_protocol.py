"""The consumer group protocol (KIP-848) with unmodified librdkafka consumers
(confluent-kafka, ``group.protocol=consumer``): the broker assigns, members revoke before others
start, a SIGKILLed member's partitions move once its session ends, commits are checked against
member epochs, and a classic group emptied and taken over keeps its offsets."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess
from tests.support.consumer_process import records
from tests.support.consumer_protocol_load import OVERRIDES, PARTITIONS, TOPIC, SteadyProducer, log_ends
from tests.support.group_load import GroupConsumer, committed, gaps, overlapping_ownerships, read_by_group
from tests.support.waiting import wait_for


@pytest.fixture
def broker(tmp_path):
    from tests.support.broker_process import free_port

    b = BrokerProcess(tmp_path / "data", {**OVERRIDES, "metrics.listener": f"http://127.0.0.1:{free_port()}"}).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(10)
    yield b
    b.kill()


def owned_by(members: list[GroupConsumer]) -> list[set[int]]:
    return [m.owned() for m in members]


def spread(members: list[GroupConsumer], n: int) -> bool:
    """Every partition owned, each member holding its even share (PARTITIONS / n)."""
    sets = owned_by(members)
    return sum(map(len, sets)) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS)) \
        and all(len(s) == PARTITIONS // n for s in sets)


def test_members_share_partitions_through_joins_leaves_and_a_kill(broker, tmp_path):
    producer = SteadyProducer(broker.bootstrap).start()
    members = [GroupConsumer(f"m{i}", broker.bootstrap, "g848", TOPIC, protocol="consumer").start()
               for i in range(3)]
    wait_for(lambda: spread(members, 3), 30, "three members holding 4 partitions each")
    # a fourth member, in a process of its own (to be SIGKILLed later)
    out = tmp_path / "m3.txt"
    child = subprocess.Popen([sys.executable, "-m", "tests.support.consumer_process", broker.bootstrap, "g848",
                              TOPIC, str(out), "consumer"], cwd=Path(__file__).parents[2])
    try:
        def four_way() -> bool:
            text = out.read_text() if out.exists() else ""
            child_owned = set()
            for raw in text.splitlines():
                kind, *rest = raw.split(" ")
                if kind == "assign":
                    child_owned.update(int(p) for p in rest[1].split(",") if p)
                elif kind in ("revoke", "lost"):
                    child_owned.difference_update(int(p) for p in rest[1].split(",") if p)
            held = [child_owned, *owned_by(members)]
            return all(len(s) == 3 for s in held) and set().union(*held) == set(range(PARTITIONS))

        wait_for(four_way, 30, "four members holding 3 partitions each")
        members[2].stop()  # leaves (close)
        wait_for(lambda: sum(map(len, owned_by(members[:2]))) >= 8, 30, "the leaver's partitions taken over")
        child.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        child.wait(10)
        wait_for(lambda: spread(members[:2], 2), 30, "the killed member's partitions taken over after its session")
        took_over = time.monotonic() - killed_at
        assert took_over >= 3.0, f"partitions moved {took_over:.1f} s after the kill, before the session ended"
        time.sleep(2)  # some more consumption and commits
    finally:
        if child.poll() is None:
            child.kill()
    producer.stop()
    ends = log_ends(broker.bootstrap)
    wait_for(lambda: gaps(read_by_group(members + [records(out, "m3", killed_at)]), ends) == {}, 30,
             "every message read")
    for m in members[:2]:
        m.stop()
    everyone = members + [records(out, "m3", killed_at)]
    assert overlapping_ownerships(everyone) == []
    assert gaps(read_by_group(everyone), ends) == {}
    assert all(c.error is None for m in everyone for c in m.commits), [c for m in everyone for c in m.commits
                                                                       if c.error]
    final = committed(broker.bootstrap, "g848", TOPIC, PARTITIONS)
    assert final == ends, (final, ends)


def test_empty_classic_group_taken_over_keeps_its_offsets(broker):
    classic = GroupConsumer("old", broker.bootstrap, "g-migrate", TOPIC).start()
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(PARTITIONS * 5):
        p.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(10) == 0
    wait_for(lambda: sum(len(s) for s in classic.read().values()) == PARTITIONS * 5, 30, "the classic member reads")
    wait_for(lambda: committed(broker.bootstrap, "g-migrate", TOPIC, PARTITIONS) == dict.fromkeys(
        range(PARTITIONS), 5), 30, "its commits")
    classic.stop()
    new = GroupConsumer("new", broker.bootstrap, "g-migrate", TOPIC, protocol="consumer").start()
    wait_for(lambda: len(new.owned()) == PARTITIONS, 30, "the consumer-protocol member holds every partition")
    time.sleep(1)
    assert new.read() == {}  # it starts from the classic group's offsets: nothing again
    for i in range(PARTITIONS):
        p.produce(TOPIC, b"more", partition=i)
    assert p.flush(10) == 0
    wait_for(lambda: sum(len(s) for s in new.read().values()) == PARTITIONS, 30, "it reads the new messages")
    assert all(min(s) == 5 for s in new.read().values())
    new.stop()


def test_gregor_groups_shows_consumer_protocol_groups(broker):
    """gregor groups list / describe: the group's type, epochs, assignor, each member's epoch,
    current and target assignment, and the committed offsets with their lag."""
    import json

    members = [GroupConsumer(f"d{i}", broker.bootstrap, "g-describe", TOPIC, protocol="consumer").start()
               for i in range(2)]
    wait_for(lambda: spread(members, 2), 30, "two members holding 6 partitions each")

    def cli(*args: str) -> object:
        out = subprocess.run([sys.executable, "-m", "gregor", *args, "--bootstrap-server", broker.bootstrap, "--json"],
                             capture_output=True, text=True, timeout=60, check=True)
        return json.loads(out.stdout)

    listed = cli("groups", "list")
    assert {"group": "g-describe", "type": "consumer", "state": "Stable", "protocol_type": "consumer",
            "coordinator": 0} in listed
    d = cli("groups", "describe", "g-describe")
    assert (d["type"], d["state"], d["assignor"]) == ("consumer", "Stable", "uniform")
    assert d["phase"].startswith("Stable for ")
    assert d["holding_up"] == []
    assert d["group_epoch"] == d["assignment_epoch"] == 2
    by_client = {m["client_id"]: m for m in d["members"]}
    assert set(by_client) == {"d0", "d1"}
    for m in members:
        shown = by_client[m.name]
        assert shown["member_epoch"] == 2 and shown["to_revoke"] == [] and shown["to_assign"] == []
        assert sorted(shown["assignment"]) == sorted(f"{TOPIC}-{p}" for p in m.owned()) == sorted(shown["target"])
    assert {(r["topic"], r["partition"]): r["client_id"] for r in d["offsets"]} == {
        (TOPIC, p): m.name for m in members for p in m.owned()}
    for m in members:
        m.stop()


def cli_run(broker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor", *args, "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=60)


def test_operators_steer_the_assignment(broker):
    """gregor groups assign: pins to an instance id and a host, isolation of a member, a freeze, a
    waiting pin; a bad change is refused and changes nothing; steering survives a broker restart."""
    import json

    members = [GroupConsumer(f"s{i}", broker.bootstrap, "g-steer", TOPIC, protocol="consumer",
                             instance_id=f"inst-{i}").start() for i in range(3)]
    wait_for(lambda: spread(members, 3), 30, "three members holding 4 partitions each")
    by_instance = {m.instance_id: m for m in members}

    out = cli_run(broker, "groups", "assign", "g-steer", "--pin", f"{TOPIC}:0=inst-0", "--pin", f"{TOPIC}:1=inst-0",
                  "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    dry = json.loads(out.stdout)
    planned = {m["group_instance_id"]: m["target"] for m in dry["members"]}
    assert {f"{TOPIC}-0", f"{TOPIC}-1"} <= set(planned["inst-0"]) and sum(map(len, planned.values())) == 12

    out = cli_run(broker, "groups", "assign", "g-steer", "--pin", f"{TOPIC}:0=inst-0", "--pin", f"{TOPIC}:1=inst-0")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: {0, 1} <= by_instance["inst-0"].owned() and spread(members, 3), 30, "the pins honoured")
    assert {m.instance_id: sorted(f"{TOPIC}-{p}" for p in m.owned()) for m in members} == planned  # as planned

    # refused, and nothing changes: an unknown partition, an unknown member
    for bad in (["--pin", f"{TOPIC}:12=inst-1"], ["--pin", f"{TOPIC}:2=nobody"], ["--isolate", "ghost"]):
        out = cli_run(broker, "groups", "assign", "g-steer", *bad)
        assert out.returncode != 0 and "INVALID_CONFIG" in out.stderr, (bad, out.stdout, out.stderr)
    shown = json.loads(cli_run(broker, "groups", "assign", "g-steer", "--json").stdout)
    assert shown["steering"] == {"pins": [f"{TOPIC}:0=inst-0", f"{TOPIC}:1=inst-0"], "isolated": [], "frozen": False}

    # quarantine a member: it stays, with nothing
    assert cli_run(broker, "groups", "assign", "g-steer", "--isolate", "inst-2").returncode == 0
    wait_for(lambda: by_instance["inst-2"].owned() == set() and
             len(by_instance["inst-0"].owned()) + len(by_instance["inst-1"].owned()) == 12, 30, "inst-2 isolated")
    described = json.loads(cli_run(broker, "groups", "describe", "g-steer", "--json").stdout)
    assert {m["group_instance_id"] for m in described["members"]} == {"inst-0", "inst-1", "inst-2"}
    # describe shows the steering beside each member: its pins, whether it is isolated
    by_id = {m["group_instance_id"]: m for m in described["members"]}
    assert by_id["inst-0"]["pinned"] == [f"{TOPIC}-0", f"{TOPIC}-1"] and by_id["inst-0"]["steering"] is None
    assert by_id["inst-2"]["steering"] == "isolated" and by_id["inst-2"]["pinned"] == []
    steer = described["steering"]
    assert steer["isolated"] == ["inst-2"] and steer["frozen"] is False
    assert [(p["partition"], p["member"], p["state"]) for p in steer["pins"]] == [
        (f"{TOPIC}-0", by_id["inst-0"]["member_id"], "pinned"), (f"{TOPIC}-1", by_id["inst-0"]["member_id"], "pinned")]
    table = cli_run(broker, "groups", "describe", "g-steer").stdout
    assert "Steering: 2 pin(s), 1 isolated, not frozen" in table and f"pin {TOPIC}-0 -> " in table
    assert "isolated inst-2" in table
    # and the metrics say the same
    from tests.support.metrics_scrape import scrape

    _, samples = scrape(int(broker.overrides["metrics.listener"].rsplit(":", 1)[1]))
    assert {lb["state"]: v for lb, v in samples["gregor_group_steering_pins"] if lb["group"] == "g-steer"} == {
        "pinned": 2, "waiting": 0, "fell_back": 0}
    assert [v for lb, v in samples["gregor_group_steering_isolated_members"] if lb["group"] == "g-steer"] == [1]
    assert [v for lb, v in samples["gregor_group_steering_frozen"] if lb["group"] == "g-steer"] == [0]

    # restart the broker: the steering is still there and honoured
    for m in members:
        m.stop()
    broker.restart()
    members = [GroupConsumer(f"t{i}", broker.bootstrap, "g-steer", TOPIC, protocol="consumer",
                             instance_id=f"inst-{i}").start() for i in range(3)]
    by_instance = {m.instance_id: m for m in members}
    wait_for(lambda: {0, 1} <= by_instance["inst-0"].owned() and by_instance["inst-2"].owned() == set()
             and len(by_instance["inst-0"].owned() | by_instance["inst-1"].owned()) == 12, 60,
             "steering honoured after a restart")
    assert cli_run(broker, "groups", "assign", "g-steer", "--release", "inst-2", "--unpin", f"{TOPIC}:0",
                   "--unpin", f"{TOPIC}:1").returncode == 0
    wait_for(lambda: spread(members, 3), 30, "balanced again once released and unpinned")
    for m in members:
        m.stop()


def test_admin_lists_groups_by_type_and_describes_both_kinds(broker):
    """KIP-1043 / KIP-848 admin, as confluent-kafka 2.16 calls them: ListGroups v5 filters by type
    (classic, consumer); DescribeConsumerGroups of a consumer-protocol group comes from
    ConsumerGroupDescribe (its type, members, assignments, KIP-1099 member types), of a classic
    group from DescribeGroups after ConsumerGroupDescribe says it is not a consumer group."""
    from confluent_kafka import ConsumerGroupType

    classic = GroupConsumer("k0", broker.bootstrap, "g-classic", TOPIC).start()
    modern = GroupConsumer("m0", broker.bootstrap, "g-modern", TOPIC, protocol="consumer").start()
    try:
        wait_for(lambda: len(classic.owned()) == PARTITIONS and len(modern.owned()) == PARTITIONS, 30,
                 "both groups holding every partition")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def listed(types: set) -> set[str]:
            r = admin.list_consumer_groups(types=types, request_timeout=10).result()
            return {g.group_id for g in r.valid}

        assert listed({ConsumerGroupType.CONSUMER}) == {"g-modern"}
        assert listed({ConsumerGroupType.CLASSIC}) == {"g-classic"}
        assert listed(set()) >= {"g-modern", "g-classic"}
        got = {g: f.result() for g, f in admin.describe_consumer_groups(["g-modern", "g-classic"],
                                                                        request_timeout=10).items()}
        assert got["g-modern"].type == ConsumerGroupType.CONSUMER and got["g-classic"].type == ConsumerGroupType.CLASSIC
        for g in got.values():
            assert len(g.members) == 1
            assert len(g.members[0].assignment.topic_partitions) == PARTITIONS
        assert got["g-modern"].members[0].client_id == "m0" and got["g-classic"].members[0].client_id == "k0"
    finally:
        classic.stop()
        modern.stop()


def test_admin_deletes_offsets_of_a_consumer_protocol_group_it_does_not_subscribe_to(broker):
    """OffsetDelete (kafka-python's admin) on a consumer-protocol group with a member, as librdkafka's
    0081 does under group.protocol=consumer: the subscribed topic's offsets are refused
    GROUP_SUBSCRIBED_TO_TOPIC, another topic's are deleted. It was GROUP_ID_NOT_FOUND."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("other", 1)])["other"].result(10)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4 * PARTITIONS):
        p.produce(TOPIC, b"x", partition=i % PARTITIONS)
    assert p.flush(10) == 0
    m = GroupConsumer("d0", broker.bootstrap, "g-del", TOPIC, protocol="consumer").start()
    try:
        wait_for(lambda: len(m.owned()) == PARTITIONS and m.commits, 30, "the member holding and committing")
        from kafka import TopicPartition as KTP
        from kafka.admin import KafkaAdminClient

        kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            got = kadmin.delete_group_offsets("g-del", [KTP(TOPIC, 0), KTP("other", 0)])
        finally:
            kadmin.close()
        assert {tp.topic: err.__name__ for tp, err in got.items()} == {
            TOPIC: "GroupSubscribedToTopicError", "other": "NoError"}
    finally:
        m.stop()


def test_consumption_of_consumer_protocol_groups_is_attributed(tmp_path):
    """Two consumer-protocol groups sharing a client id read the same topic: the Prometheus
    counters carry each group's own messages, from the members' assignments in the coordinator's
    records (no group is guessed, nothing lands in __no_group__)."""
    from tests.support.broker_process import free_port
    from tests.support.metrics_scrape import scrape

    port = free_port()
    b = BrokerProcess(tmp_path / "m", {**OVERRIDES, "metrics.listener": f"http://127.0.0.1:{port}"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 4)])[TOPIC].result(10)
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(400):
            p.produce(TOPIC, b"x" * 10, partition=i % 4)
        assert p.flush(10) == 0
        readers = [GroupConsumer(f"shared-{g}", b.bootstrap, g, TOPIC, protocol="consumer") for g in ("ga", "gb")]
        for r in readers:
            r.name = "shared"  # client.id "shared" for both groups
            r.start()
        wait_for(lambda: all(sum(map(len, r.read().values())) == 400 for r in readers), 30, "both groups read all")
        _, samples = scrape(port)
        phases = {(lb["group"], lb["phase"]) for lb, v in samples.get("gregor_group_phase", []) if v == 1}
        assert phases == {("ga", "Stable"), ("gb", "Stable")}, phases
        assert {lb["group"] for lb, _ in samples.get("gregor_group_state_seconds", [])} == {"ga", "gb"}
        for r in readers:
            r.stop()

        def counted() -> dict[str, float]:
            _, samples = scrape(port)
            out: dict[str, float] = {}
            for labels, v in samples.get("gregor_group_consumed_messages_total", []):
                out[labels["group"]] = out.get(labels["group"], 0) + v
            return out

        got = wait_for(lambda: (c := counted()) and c.get("ga") == 400 and c.get("gb") == 400 and c, 15,
                       "each group's 400 messages counted")
        assert set(got) == {"ga", "gb"}, got
    finally:
        b.kill()


class SlowRevoker(GroupConsumer):
    """A member whose on_revoke takes ``delay`` seconds (its work on the partitions not done yet)."""

    delay: float = 4.0

    def _on_revoke(self, consumer, partitions) -> None:
        if partitions:
            time.sleep(self.delay)
        super()._on_revoke(consumer, partitions)


def test_describe_names_the_member_that_holds_the_group_in_closing(broker):
    """While a member is still revoking, the group is Closing and gregor groups describe (from the
    coordinator's read-only gregor.status.* group configs) names it and what it must revoke;
    Prometheus-free, from any admin client: DescribeConfigs on the GROUP resource."""
    import json

    slow = SlowRevoker("slow", broker.bootstrap, "g-phase", TOPIC, protocol="consumer").start()
    wait_for(lambda: len(slow.owned()) == PARTITIONS, 30, "the first member holding every partition")
    other = GroupConsumer("other", broker.bootstrap, "g-phase", TOPIC, protocol="consumer").start()

    def closing() -> dict | None:
        out = subprocess.run([sys.executable, "-m", "gregor", "groups", "describe", "g-phase", "--bootstrap-server",
                              broker.bootstrap, "--json"], capture_output=True, text=True, timeout=60)
        d = json.loads(out.stdout)
        return d if d["phase"].startswith("Closing") else None

    d = wait_for(closing, 20, "the group Closing")
    slow_id = next(m["member_id"] for m in d["members"] if m["client_id"] == "slow")
    assert len(d["holding_up"]) == 1 and d["holding_up"][0].startswith(f"{slow_id} (slow) must revoke 6 partition(s)")
    wait_for(lambda: len(other.owned()) == 6 and len(slow.owned()) == 6, 30, "the move completed")
    for m in (slow, other):
        m.stop()


def test_subscription_by_regular_expression_picks_up_new_topics(broker):
    """librdkafka subscribes to ^orders-.* (sent as SubscribedTopicRegex): the members read the
    matching topics, nothing else, and a matching topic created later without any client action."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for t in ("orders-eu", "orders-us", "payments"):
        admin.create_topics([NewTopic(t, 2)])[t].result(10)
    p = Producer({"bootstrap.servers": broker.bootstrap})

    def write(topic: str, n: int) -> None:
        for i in range(n):
            p.produce(topic, str(i).encode(), partition=i % 2)
        assert p.flush(10) == 0

    for t in ("orders-eu", "orders-us", "payments"):
        write(t, 20)
    got: dict[str, int] = {}
    stop = threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-regex", "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
        c.subscribe(["^orders-.*"])
        while not stop.is_set():
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got[m.topic()] = got.get(m.topic(), 0) + 1
        c.close()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    try:
        wait_for(lambda: got.get("orders-eu") == 20 and got.get("orders-us") == 20, 30, "the matching topics read")
        admin.create_topics([NewTopic("orders-apac", 2)])["orders-apac"].result(10)
        write("orders-apac", 20)
        wait_for(lambda: got.get("orders-apac") == 20, 60, "a matching topic created later read")
        assert "payments" not in got
    finally:
        stop.set()
        t.join(30)


def test_freeze_and_fallback_with_real_consumers(broker):
    """Frozen: a member that joins gets nothing, the partitions of one that leaves go to the
    others; a --fallback pin goes to another member while its member is away and comes back to it;
    a pin without it waits, unassigned."""
    members = {i: GroupConsumer(f"f{i}", broker.bootstrap, "g-freeze", TOPIC, protocol="consumer",
                                instance_id=f"fz-{i}").start() for i in range(2)}
    wait_for(lambda: spread(list(members.values()), 2), 30, "two members holding 6 partitions each")
    assert cli_run(broker, "groups", "assign", "g-freeze", "--freeze").returncode == 0
    before = {i: m.owned() for i, m in members.items()}
    late = GroupConsumer("late", broker.bootstrap, "g-freeze", TOPIC, protocol="consumer",
                         instance_id="fz-late").start()
    time.sleep(3)  # several heartbeats: nothing moves
    assert late.owned() == set() and {i: m.owned() for i, m in members.items()} == before
    members[1].stop()
    wait_for(lambda: members[0].owned() == set(range(PARTITIONS)) and late.owned() == set(), 30,
             "the leaver's partitions go to the established member only")
    assert cli_run(broker, "groups", "assign", "g-freeze", "--unfreeze").returncode == 0
    wait_for(lambda: len(late.owned()) == 6 and len(members[0].owned()) == 6, 30, "balanced once unfrozen")

    # pins: partition 0 waits for fz-late, partition 1 falls back while fz-late is away
    out = cli_run(broker, "groups", "assign", "g-freeze", "--pin", f"{TOPIC}:0=fz-late")
    assert out.returncode == 0, out.stderr
    out = cli_run(broker, "groups", "assign", "g-freeze", "--pin", f"{TOPIC}:1=fz-late", "--fallback")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: {0, 1} <= late.owned(), 30, "both pins honoured")
    late.stop()
    wait_for(lambda: members[0].owned() == set(range(1, PARTITIONS)), 30,
             "partition 1 falls back to the other member, partition 0 waits unassigned")
    import json

    pins = {p["partition"]: p for p in json.loads(cli_run(broker, "groups", "describe", "g-freeze",
                                                          "--json").stdout)["steering"]["pins"]}
    assert pins[f"{TOPIC}-0"]["state"] == "waiting" and "fz-late" in pins[f"{TOPIC}-0"]["reason"]
    assert pins[f"{TOPIC}-1"]["state"] == "fell back" and pins[f"{TOPIC}-1"]["member"] is None
    table = cli_run(broker, "groups", "describe", "g-freeze").stdout
    assert f"pin {TOPIC}-0 -> - (waiting: pinned to fz-late" in table and "(fell back: fz-late)" in table
    back = GroupConsumer("back", broker.bootstrap, "g-freeze", TOPIC, protocol="consumer",
                         instance_id="fz-late").start()
    wait_for(lambda: {0, 1} <= back.owned() and len(back.owned()) + len(members[0].owned()) == PARTITIONS, 30,
             "both pinned partitions back with their member")
    for m in (members[0], back):
        m.stop()
