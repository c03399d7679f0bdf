"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka) against a real
broker: queue semantics over several consumers of one partition, RELEASE and REJECT, the
delivery count limit, a lock that expires, and a broker SIGKILLed and restarted: what was
acknowledged is never delivered again, what was not is."""

from __future__ import annotations

import json
import time

import confluent_kafka as ck
import pytest

from tests.support.broker_process import free_port
from tests.support.metrics_scrape import scrape
from tests.support.share_clients import create, poll_values, produce, share_consumer, start_group_at_earliest

pytestmark = pytest.mark.timeout(240)


def test_consumers_of_one_partition_share_its_records_each_delivered_once(broker_factory):
    b = broker_factory()
    create(b.bootstrap, "jobs")
    start_group_at_earliest(b, "workers")
    values = [f"job-{i}" for i in range(300)]
    produce(b.bootstrap, "jobs", values)
    seen: list[str] = []
    with share_consumer(b.bootstrap, "workers", "jobs", max_records=20) as c1, \
            share_consumer(b.bootstrap, "workers", "jobs", max_records=20) as c2:
        deadline = time.monotonic() + 60
        per = {1: 0, 2: 0}
        while time.monotonic() < deadline and len(seen) < len(values):
            for n, c in ((1, c1), (2, c2)):
                msgs = [m for m in c.poll(0.3) if m.error() is None]
                per[n] += len(msgs)
                seen += [m.value().decode() for m in msgs]
        c1.commit_sync()
        c2.commit_sync()
    assert sorted(seen) == sorted(values), "every record once, none twice"
    assert per[1] > 0 and per[2] > 0, f"both consumers of the one partition got records: {per}"


def test_release_redelivers_reject_does_not_and_the_limit_archives(broker_factory):
    port = free_port()
    b = broker_factory(group_share_delivery_count_limit="3", **{"metrics.listener": f"http://127.0.0.1:{port}"})
    create(b.bootstrap, "tasks")
    start_group_at_earliest(b, "g")
    produce(b.bootstrap, "tasks", ["keep", "drop", "poison"])
    counts: dict[str, list[int]] = {}
    with share_consumer(b.bootstrap, "g", "tasks", explicit=True) as c:
        deadline = time.monotonic() + 60
        quiet_since = None
        while time.monotonic() < deadline:
            msgs = [m for m in c.poll(0.5) if m.error() is None]
            for m in msgs:
                v = m.value().decode()
                counts.setdefault(v, []).append(m.delivery_count())
                kind = {"keep": ck.AcknowledgeType.ACCEPT, "drop": ck.AcknowledgeType.REJECT,
                        "poison": ck.AcknowledgeType.RELEASE}[v]
                c.acknowledge(m, kind)
            if msgs:
                c.commit_sync()
                quiet_since = None
            elif len(counts.get("poison", [])) >= 3:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 3:
                    break  # three seconds without a delivery after the third: archived
    assert counts["keep"] == [1] and counts["drop"] == [1]
    assert counts["poison"] == [1, 2, 3], "released records come back until the delivery count limit"
    _, samples = scrape(port)

    def metric(name: str, **labels: str) -> float:
        want = {"group": "g", "topic": "tasks", "partition": "0", **labels}
        return sum(v for ls, v in samples.get(name, []) if all(ls.get(k) == x for k, x in want.items()))

    assert metric("gregor_share_partition_acquired_total") == 5
    assert metric("gregor_share_partition_redelivered_total") == 2
    assert metric("gregor_share_partition_accepted_total") == 1 and metric("gregor_share_partition_rejected_total") == 1
    assert metric("gregor_share_partition_released_total") == 3
    assert metric("gregor_share_partition_archived_at_limit_total") == 1
    assert metric("gregor_share_partition_start_offset") == 3 and metric("gregor_share_partition_lag") == 0


def test_records_of_a_consumer_that_stops_come_back_after_the_lock(broker_factory):
    b = broker_factory(group_share_record_lock_duration_ms="2000", group_share_min_record_lock_duration_ms="1000")
    create(b.bootstrap, "q")
    start_group_at_earliest(b, "g")
    produce(b.bootstrap, "q", [f"r{i}" for i in range(20)])
    stuck = ck.ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": "g",
                              "share.acknowledgement.mode": "explicit"})
    stuck.subscribe(["q"])
    got = poll_values(stuck, time.monotonic() + 30, want=20)
    assert len(got) == 20  # acquired, never acknowledged; the consumer hangs on to them
    started = time.monotonic()
    with share_consumer(b.bootstrap, "g", "q") as other:
        again = poll_values(other, time.monotonic() + 30, want=20)
        waited = time.monotonic() - started
        other.commit_sync()
    assert sorted(m.value().decode() for m in again) == sorted(f"r{i}" for i in range(20))
    assert all(m.delivery_count() == 2 for m in again)
    assert waited >= 1.0, "not before the lock expired"
    stuck.close()


def test_a_broker_killed_and_restarted_delivers_what_was_not_acknowledged_and_nothing_else(broker_factory):
    b = broker_factory()
    create(b.bootstrap, "orders", partitions=2)
    start_group_at_earliest(b, "g")
    values = [f"o{i}" for i in range(200)]
    produce(b.bootstrap, "orders", values)
    accepted: set[str] = set()
    with share_consumer(b.bootstrap, "g", "orders", explicit=True) as c:
        held = poll_values(c, time.monotonic() + 30, want=200)
        for m in held[:120]:
            c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
            accepted.add(m.value().decode())
        c.commit_sync()  # answered once the state is written
        b.kill()
    b.start()
    with share_consumer(b.bootstrap, "g", "orders") as c:
        rest = poll_values(c, time.monotonic() + 60, want=len(values) - len(accepted))
        extra = poll_values(c, time.monotonic() + 3)
        c.commit_sync()
    redelivered = [m.value().decode() for m in rest + extra]
    assert not accepted & set(redelivered), "an acknowledged record was delivered again"
    assert sorted(redelivered) == sorted(set(values) - accepted)


def test_gregor_groups_lists_describes_and_deletes_a_share_group(broker_factory, capsys):
    from gregor.cli import main

    b = broker_factory()
    create(b.bootstrap, "work", partitions=2)
    start_group_at_earliest(b, "crew")
    produce(b.bootstrap, "work", [f"w{i}" for i in range(40)])
    with share_consumer(b.bootstrap, "crew", "work", explicit=True) as c:
        msgs = poll_values(c, time.monotonic() + 30, want=40)
        for m in msgs[:10]:
            c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
        c.commit_sync()
        capsys.readouterr()
        assert main(["groups", "list", "--bootstrap-server", b.bootstrap, "--json"]) == 0
        listed = {g["group"]: g for g in json.loads(capsys.readouterr().out)}
        assert listed["crew"]["type"] == "share" and listed["crew"]["state"] == "Stable"
        assert main(["groups", "describe", "crew", "--bootstrap-server", b.bootstrap, "--json"]) == 0
        described = json.loads(capsys.readouterr().out)
        assert described["type"] == "share" and len(described["members"]) == 1
        assert sorted(described["members"][0]["assignment"]) == ["work-0", "work-1"]
        rows = {r["partition"]: r for r in described["offsets"]}
        assert set(rows) == {0, 1}
        # 40 records, 10 accepted: the rest is still to be delivered completely (acquired, not acknowledged)
        assert sum(r["lag"] for r in rows.values()) == 30
        assert main(["groups", "delete", "crew", "--bootstrap-server", b.bootstrap]) != 0  # it has a member
    capsys.readouterr()
    assert main(["groups", "delete", "crew", "--bootstrap-server", b.bootstrap]) == 0
    assert "deleted" in capsys.readouterr().out
    assert main(["groups", "list", "--bootstrap-server", b.bootstrap, "--json"]) == 0
    assert "crew" not in {g["group"] for g in json.loads(capsys.readouterr().out)}


def test_read_committed_share_group_never_sees_aborted_records(broker_factory):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    b = broker_factory()
    create(b.bootstrap, "ledger")
    start_group_at_earliest(b, "auditors")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, "auditors", incremental_configs=[
        ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "ledger-1"})
    p.init_transactions(30)
    for t in range(6):
        p.begin_transaction()
        for i in range(5):
            p.produce("ledger", f"{t}:{i}".encode())
        if t % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    with share_consumer(b.bootstrap, "auditors", "ledger") as c:
        got = poll_values(c, time.monotonic() + 30, want=15)
        got += poll_values(c, time.monotonic() + 2)
        c.commit_sync()
    assert sorted(m.value().decode() for m in got) == sorted(f"{t}:{i}" for t in (0, 2, 4) for i in range(5))


def test_reset_and_delete_a_share_groups_offsets_with_gregor_groups(broker_factory, capsys):
    from gregor.cli import main

    b = broker_factory()
    create(b.bootstrap, "replay")
    start_group_at_earliest(b, "readers")
    values = [f"r{i}" for i in range(30)]
    produce(b.bootstrap, "replay", values)

    def consume_all(expected: int) -> list[str]:
        with share_consumer(b.bootstrap, "readers", "replay") as c:
            got = poll_values(c, time.monotonic() + 30, want=expected) if expected else []
            got += poll_values(c, time.monotonic() + 3)  # and nothing more
            c.commit_sync()
        return [m.value().decode() for m in got]

    assert sorted(consume_all(30)) == sorted(values)
    assert consume_all(0) == []  # all acknowledged: nothing again
    capsys.readouterr()
    args = ["groups", "reset-offsets", "readers", "--topic", "replay", "--bootstrap-server", b.bootstrap]
    assert main([*args, "--to-offset", "20", "--json"]) == 0  # a dry run
    assert json.loads(capsys.readouterr().out)[0]["new_start_offset"] == 20
    assert consume_all(0) == []
    assert main([*args, "--to-offset", "20", "--execute"]) == 0
    assert sorted(consume_all(10)) == sorted(values[20:])
    capsys.readouterr()
    assert main(["groups", "delete-offsets", "readers", "--topic", "replay", "--bootstrap-server", b.bootstrap]) == 0
    assert "deleted" in capsys.readouterr().out
    assert sorted(consume_all(30)) == sorted(values)  # share.auto.offset.reset=earliest again
    with share_consumer(b.bootstrap, "readers", "replay") as busy:
        poll_values(busy, time.monotonic() + 2)
        capsys.readouterr()
        assert main([*args, "--to-earliest", "--execute"]) != 0  # not while it has a member
        busy.commit_sync()


def test_operators_steer_a_share_group(broker_factory, capsys):
    """gregor groups assign on a share group: an isolated member keeps its place with nothing;
    the other takes every partition; the target shown is the share assignor's."""
    from gregor.cli import main

    b = broker_factory()
    create(b.bootstrap, "steered", partitions=2)
    consumers = [ck.ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": "crew", "client.id": f"c{i}"})
                 for i in range(2)]
    for c in consumers:
        c.subscribe(["steered"])

    def describe() -> dict:
        capsys.readouterr()
        assert main(["groups", "describe", "crew", "--bootstrap-server", b.bootstrap, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    def members_hold(want: list[list[str]]) -> bool:
        for c in consumers:
            c.poll(0.2)
        return sorted(sorted(m["assignment"]) for m in describe()["members"]) == want

    try:
        deadline = time.monotonic() + 30
        while not members_hold([["steered-0"], ["steered-1"]]):
            assert time.monotonic() < deadline, "the partitions were not spread over the two members"
        victim = describe()["members"][0]["member_id"]
        capsys.readouterr()
        assert main(["groups", "assign", "crew", "--isolate", victim, "--bootstrap-server", b.bootstrap]) == 0
        deadline = time.monotonic() + 30
        while not members_hold([[], ["steered-0", "steered-1"]]):
            assert time.monotonic() < deadline, "the isolated member kept its partition"
        assert {m["member_id"]: m["assignment"] for m in describe()["members"]}[victim] == []
    finally:
        for c in consumers:
            c.close()


HOLDER = """
import sys, time
import confluent_kafka as ck
c = ck.ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": "g", "share.acknowledgement.mode": "explicit"})
c.subscribe(["held"])
got = 0
while got < 30:
    got += sum(1 for m in c.poll(0.5) if m.error() is None)
print("acquired", got, flush=True)
time.sleep(600)
"""


def test_records_of_a_sigkilled_consumer_come_back(broker_factory):
    """A consumer process SIGKILLed holding acquired records: its connection closes, its share
    session ends and the records are delivered again (Kafka releases them then, at the latest
    when their lock expires), with their delivery count."""
    import signal
    import subprocess
    import sys

    b = broker_factory(group_share_record_lock_duration_ms="15000")
    create(b.bootstrap, "held")
    start_group_at_earliest(b, "g")
    produce(b.bootstrap, "held", [f"h{i}" for i in range(30)])
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, b.bootstrap], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["acquired", "30"]
        killed = time.monotonic()
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        with share_consumer(b.bootstrap, "g", "held") as c:
            again = poll_values(c, time.monotonic() + 30, want=30)
            c.commit_sync()
        waited = time.monotonic() - killed
    finally:
        if holder.poll() is None:
            holder.kill()
    assert sorted(m.value().decode() for m in again) == sorted(f"h{i}" for i in range(30))
    assert all(m.delivery_count() == 2 for m in again)
    assert waited < 15, f"released when the connection closed, not after the 15 s lock ({waited:.1f} s)"
