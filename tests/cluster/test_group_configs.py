"""Group configs in a cluster are the cluster's (cluster/zk_group_configs.py): ZooKeeper holds them
(``/config/groups/<group id>``), every broker mirrors them, and the group's coordinator applies a
change wherever it was made.

Three real brokers over a real ZooKeeper, consumer-protocol (KIP-848) members of librdkafka with
static instance ids (tests/support/group_load.py). The operator steers the group with ``gregor
groups assign`` through a broker that does not coordinate it (the CLI finds the coordinator); every
broker describes the same configs; the coordinator moves (a controlled shutdown of its broker) and
the new coordinator honours the steering, also after that broker restarts; a session timeout set
through a non-coordinator broker governs the members. Timings are printed (pytest -s).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from gregor.admin.client import AdminClient as GregorAdmin
from gregor.apis.describe_configs import GROUP
from gregor.assignment import steering
from gregor.cluster.dynamic_configs import FILE, DynamicConfigs
from gregor.cluster.zk.client import ZkClient
from gregor.cluster.zk.group_configs import (
    ZkGroupConfigs,
    decode_group_config,
    encode_group_config,
    group_config_path,
    group_id_of,
    znode_name,
)
from gregor.config import BrokerConfig
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from tests.support.cluster import BrokerCluster
from tests.support.group_load import GroupConsumer, offsets_topic_ready
from tests.support.replication import create_topic
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

TOPIC = "steered"
PARTITIONS = 6
OFFSETS_PARTITIONS = 3
GROUP_ID = "g-cluster-steer"
DEFAULT_SESSION_MS = 10000  # the brokers' group.consumer.session.timeout.ms
GROUP_SESSION_MS = 3000  # the group's own consumer.session.timeout.ms, set through a non-coordinator
OVERRIDES = {
    "group.coordinator.rebalance.protocols": "classic,consumer",
    "group.consumer.min.heartbeat.interval.ms": "250", "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": str(DEFAULT_SESSION_MS),
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "zookeeper.session.timeout.ms": "4000", "replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "500", "leader.imbalance.check.interval.seconds": "3600",
}
SET, APPEND = 0, 2


# -- helpers ---------------------------------------------------------------------------------------
def gregor(cluster: BrokerCluster, broker_id: int, *args: str) -> subprocess.CompletedProcess[str]:
    """The gregor CLI with --bootstrap-server naming one broker only."""
    return subprocess.run([sys.executable, "-m", "gregor", *args, "--bootstrap-server",
                           cluster.broker(broker_id).bootstrap], capture_output=True, text=True, timeout=60)


def coordinator(cluster: BrokerCluster) -> int:
    """The coordinator a live broker names (-1: none now)."""
    try:
        admin = GregorAdmin(cluster.broker(cluster.alive_ids()[0]).bootstrap)
        try:
            node, code, _ = admin.find_coordinator(GROUP_ID)
        finally:
            admin.close()
    except Exception:  # noqa: BLE001 - a broker on its way out: ask again
        return -1
    return node.node_id if node is not None and code == ErrorCode.none else -1


def call(cluster: BrokerCluster, broker_id: int, api: ApiKey, body: dict[str, Any]) -> Any:
    """One request to one broker (not to the coordinator it would name)."""
    admin = GregorAdmin(cluster.broker(broker_id).bootstrap)
    try:
        return admin.conn().call(api, body)
    finally:
        admin.close()


def group_configs(cluster: BrokerCluster, broker_id: int) -> dict[str, tuple[str, int]]:
    """The group's configs as ``broker_id`` describes them: name -> (value, config source)."""
    r = call(cluster, broker_id, ApiKey.DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": GROUP, "resource_name": GROUP_ID, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    res = r.results[0]
    assert res.error_code == ErrorCode.none, res
    return {c.name: (c.value or "", c.config_source) for c in res.configs}


def alter(cluster: BrokerCluster, broker_id: int, name: str, value: str, op: int = SET) -> tuple[ErrorCode, str]:
    r = call(cluster, broker_id, ApiKey.INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{"resource_type": GROUP, "resource_name": GROUP_ID,
                       "configs": [{"name": name, "config_operation": op, "value": value}]}],
        "validate_only": False})
    res = r.responses[0]
    return ErrorCode(res.error_code), res.error_message or ""


def same_everywhere(cluster: BrokerCluster, want: dict[str, str]) -> bool:
    """Every live broker describes ``want`` for those keys."""
    for b in cluster.alive_ids():
        try:
            got = group_configs(cluster, b)
        except Exception:  # noqa: BLE001 - a broker still starting: ask again
            return False
        if {k: got[k][0] for k in want} != want:
            return False
    return True


def owned(members: dict[str, GroupConsumer]) -> dict[str, set[int]]:
    return {i: m.owned() for i, m in members.items()}


def steered(members: dict[str, GroupConsumer], pinned: dict[int, str], isolated: str) -> Callable[[], bool]:
    """Every partition owned once, pinned ones by their member, nothing by the isolated one."""
    def check() -> bool:
        now = owned(members)
        everyone = [p for s in now.values() for p in s]
        return (sorted(everyone) == list(range(PARTITIONS)) and not now[isolated]
                and all(p in now[inst] for p, inst in pinned.items()))
    return check


def settled(cond: Callable[[], bool], seconds: float = 1.5) -> Callable[[], bool]:
    """``cond`` holds now and for ``seconds`` on (not only for a moment of a reassignment)."""
    def check() -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not cond():
                return False
            time.sleep(0.1)
        return True
    return check


def unpinned_of(members: dict[str, GroupConsumer], instance: str, pinned: dict[int, str]) -> int:
    return min(p for p in members[instance].owned() if p not in pinned)


def timed(what: str, fn: Callable[[], Any], timeout: float, t0: float) -> Any:
    got = wait_for(fn, timeout, what)
    print(f"{time.monotonic() - t0:6.1f} s  {what}")
    return got


# -- the tests -------------------------------------------------------------------------------------
class FakeCluster:
    def __init__(self, node_id: int, coordinator: int) -> None:
        self.node_id = node_id
        self.coordinator = coordinator

    def partition(self, topic: str, partition: int) -> Any:
        return SimpleNamespace(leader=self.coordinator)


class FakeGroups:
    """The group coordinator as the store sees it: who leads the group's partition, and the bumps."""

    def __init__(self, node_id: int, coordinator: int) -> None:
        self.cluster = FakeCluster(node_id, coordinator)
        self.bumps: list[str] = []

    def partition_for(self, group_id: str) -> int:
        return 0

    async def steering_changed(self, group_id: str) -> None:
        self.bumps.append(group_id)


def test_brokers_share_group_configs_through_zookeeper(tmp_path, zookeeper):
    """In process, two brokers' stores over one ZooKeeper (broker 1 coordinates the group): a change
    through either is mirrored by both, a steering change bumps the epoch on the coordinator only,
    also when the other broker wrote it; a broker started later reads them; group configs an older
    version kept in a broker's file move to ZooKeeper once."""
    connect = zookeeper.connect_string(f"/gregor-gc-{uuid.uuid4().hex[:8]}")
    (tmp_path / "b1").mkdir()
    (tmp_path / "b1" / FILE).write_text(json.dumps({"version": 1, "broker": {}, "cluster_default": {},
                                                    "groups": {"old": {"consumer.session.timeout.ms": "50000"}}}))
    opened: list[LogManager] = []

    def dynamic(name: str, node_id: int) -> DynamicConfigs:
        config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path / name), "zookeeper.connect": connect})
        registry = TopicRegistry(config.data_dir)
        logs = LogManager(config.data_dir, config.topic_defaults(), registry)
        logs.startup()
        opened.append(logs)
        d = DynamicConfigs(config, node_id, logs, registry)
        d.load()
        return d

    async def until(cond: Callable[[], bool], what: str) -> None:
        for _ in range(100):
            if cond():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"not within 5 s: {what}")

    def setting(d: DynamicConfigs, entries: list[tuple[str, str | None, int]]) -> Callable[[dict], dict]:
        return lambda current: d.preview_group("g", entries, current)

    async def main() -> None:
        zks = [ZkClient(connect, 6000) for _ in range(3)]
        stores: list[ZkGroupConfigs] = []
        try:
            for zk in zks:
                await zk.start()
            d1, d2 = dynamic("b1", 1), dynamic("b2", 2)
            assert d1.groups == {} and d1.file_groups == {"old": {"consumer.session.timeout.ms": "50000"}}
            g1, g2 = FakeGroups(1, coordinator=1), FakeGroups(2, coordinator=1)
            s1, s2 = ZkGroupConfigs(zks[0], d1, g1), ZkGroupConfigs(zks[1], d2, g2)  # type: ignore[arg-type]
            stores += [s1, s2]
            await s1.start()
            await s2.start()
            # moved from broker 1's file: in ZooKeeper, known to both, gone from the file
            assert d1.groups["old"] == d2.groups["old"] == {"consumer.session.timeout.ms": "50000"}
            assert json.loads((tmp_path / "b1" / FILE).read_text())["groups"] == {}
            assert d1.group_store is s1 and d1.group_config("old")[0]["consumer.session.timeout.ms"] == "50000"

            # steering written through broker 2: broker 1 (the coordinator) mirrors it and bumps
            await s2.alter("g", setting(d2, [(steering.PINS, "t:0=a", SET)]), validate_only=False)
            assert d2.groups["g"] == {steering.PINS: "t:0=a"}  # mirrored by the writer at once
            await until(lambda: d1.groups.get("g") == {steering.PINS: "t:0=a"} and g1.bumps == ["g"],
                        "broker 1 mirroring the pin and bumping the epoch")
            assert g2.bumps == []
            # validate_only writes nothing; a non-steering change is mirrored without a bump
            await s1.alter("g", setting(d1, [(steering.PINS, "t:1=a", APPEND)]), validate_only=True)
            await s1.alter("g", setting(d1, [("consumer.session.timeout.ms", "50000", SET)]), validate_only=False)
            want = {steering.PINS: "t:0=a", "consumer.session.timeout.ms": "50000"}
            await until(lambda: d2.groups.get("g") == want, "broker 2 mirroring the session timeout")
            assert d1.groups["g"] == want and g1.bumps == ["g"]
            # two alters at once through both brokers: neither is lost (conditional writes)
            await asyncio.gather(
                s1.alter("g", setting(d1, [("consumer.heartbeat.interval.ms", "6000", SET)]), False),
                s2.alter("g", setting(d2, [("share.auto.offset.reset", "earliest", SET)]), False))
            want = {**want, "consumer.heartbeat.interval.ms": "6000", "share.auto.offset.reset": "earliest"}
            await until(lambda: d1.groups.get("g") == want == d2.groups.get("g"), "both changes everywhere")

            # a broker started later reads them all
            d3 = dynamic("b3", 3)
            s3 = ZkGroupConfigs(zks[2], d3, FakeGroups(3, coordinator=1))  # type: ignore[arg-type]
            stores.append(s3)
            await s3.start()
            assert d3.groups == d1.groups

            # every override removed: no node, nothing anywhere, and the coordinator bumps (steering gone)
            await s2.alter("g", lambda current: {}, validate_only=False)
            assert await zks[0].get(group_config_path("g")) is None
            await until(lambda: "g" not in d1.groups and "g" not in d3.groups, "the group's configs gone")
            assert g1.bumps == ["g", "g"]
            # a node with a value this broker would refuse: logged, that key ignored
            await zks[0].create(group_config_path("h"), encode_group_config(
                {"consumer.session.timeout.ms": "1", "share.auto.offset.reset": "earliest"}))
            await until(lambda: d2.groups.get("h") == {"share.auto.offset.reset": "earliest"}, "the usable key")
            # read now, not when the watch fires: what a client set just before is seen at once
            await zks[0].create(group_config_path("r"), encode_group_config({"share.auto.offset.reset": "earliest"}))
            await d3.refresh_group("r")
            assert d3.groups["r"] == {"share.auto.offset.reset": "earliest"}
            await zks[0].delete(group_config_path("r"))
            await d3.refresh_group("r")
            assert "r" not in d3.groups
        finally:
            for s in stores:
                await s.stop()
            for zk in zks:
                await zk.stop()

    try:
        asyncio.run(main())
    finally:
        for logs in opened:
            logs.shutdown()


@pytest.mark.parametrize("group_id", ["plain-group_1", "a/b", ".", "..", "x~*y z", "gr\u00fcppe", "%41"])
def test_group_ids_make_valid_node_names(group_id):
    name = znode_name(group_id)
    assert "/" not in name and name not in (".", "..") and group_id_of(name) == group_id
    assert decode_group_config(group_id, encode_group_config({"k": "v"})) == {"k": "v"}



def test_group_configs_are_the_clusters(cluster_factory):
    t0 = time.monotonic()
    cluster = cluster_factory(3, overrides=OVERRIDES)
    for b in cluster.ids:
        admin = AdminClient({"bootstrap.servers": cluster.broker(b).bootstrap})
        wait_for(lambda admin=admin: admin.list_topics(timeout=10).controller_id >= 0, 30, f"broker {b}'s controller")
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
    offsets_topic_ready(cluster, OFFSETS_PARTITIONS, 3)
    first = timed("a coordinator", lambda: coordinator(cluster) if coordinator(cluster) > 0 else None, 30, t0)
    other = next(i for i in cluster.ids if i != first)

    members = {f"inst-{i}": GroupConsumer(f"m{i}", cluster.bootstrap, GROUP_ID, TOPIC, protocol="consumer",
                                          instance_id=f"inst-{i}").start() for i in range(3)}
    try:
        timed("three members holding 2 partitions each",
              lambda: sorted(len(s) for s in owned(members).values()) == [2, 2, 2], 60, t0)

        # steer through a broker that does not coordinate the group: the CLI finds the coordinator
        out = gregor(cluster, other, "groups", "assign", GROUP_ID, "--pin", f"{TOPIC}:0=inst-0",
                     "--pin", f"{TOPIC}:1=inst-0", "--isolate", "inst-2")
        assert out.returncode == 0, out.stderr
        pinned = {0: "inst-0", 1: "inst-0"}
        timed(f"pins and isolation honoured (coordinator {first})", settled(steered(members, pinned, "inst-2")),
              30, t0)

        # a steering change sent straight to a broker that does not coordinate the group is refused,
        # naming the coordinator
        code, message = alter(cluster, other, steering.PINS, f"{TOPIC}:2=inst-1", APPEND)
        assert code == ErrorCode.not_coordinator and f"send it to broker {first}" in message, (code, message)

        # every broker describes the same configs: ZooKeeper's
        want = {steering.PINS: f"{TOPIC}:0=inst-0,{TOPIC}:1=inst-0", steering.ISOLATED: "inst-2"}
        timed("every broker describing the steering", lambda: same_everywhere(cluster, want), 10, t0)
        with cluster.zk_client() as zk:
            held = decode_group_config(GROUP_ID, zk.get(group_config_path(GROUP_ID))[0])
        assert held == want
        assert all(not (cluster.broker(b).data_dir / "dynamic-configs.json").exists() or
                   not json.loads((cluster.broker(b).data_dir / "dynamic-configs.json").read_text()).get("groups")
                   for b in cluster.ids)

        # the coordinator moves (controlled shutdown); its broker comes back (leadership stays put)
        assert cluster.stop(first) == 0
        second = timed("a new coordinator", lambda: (c := coordinator(cluster)) not in (first, -1) and c, 60, t0)
        cluster.start_broker(first)
        # the new coordinator steers with the same configs: a new pin there (moving a partition of
        # inst-0's to inst-1) keeps the old pins and the isolation
        x = unpinned_of(members, "inst-0", pinned)
        out = gregor(cluster, first, "groups", "assign", GROUP_ID, "--pin", f"{TOPIC}:{x}=inst-1")
        assert out.returncode == 0, out.stderr
        pinned[x] = "inst-1"
        timed(f"old and new pins honoured by coordinator {second}", settled(steered(members, pinned, "inst-2")),
              30, t0)
        want[steering.PINS] += f",{TOPIC}:{x}=inst-1"
        timed("every broker describing it, the restarted one too", lambda: same_everywhere(cluster, want), 10, t0)

        # restart that coordinator: the group moves again; its broker reads the configs back
        cluster.restart(second)
        third = timed("another coordinator", lambda: (c := coordinator(cluster)) > 0 and c, 60, t0)
        timed(f"broker {second} describing the steering after its restart",
              lambda: same_everywhere(cluster, want), 10, t0)
        # a change through the restarted broker, to the coordinator now: one of inst-1's partitions
        # pinned to inst-0 instead of x; the rest of the steering holds
        y = unpinned_of(members, "inst-1", pinned)
        out = gregor(cluster, second, "groups", "assign", GROUP_ID, "--unpin", f"{TOPIC}:{x}",
                     "--pin", f"{TOPIC}:{y}=inst-0")
        assert out.returncode == 0, out.stderr
        del pinned[x]
        pinned[y] = "inst-0"
        timed(f"steering honoured by coordinator {third} after the restart",
              settled(steered(members, pinned, "inst-2")), 30, t0)

        # a node written by another hand (a broker that lost the coordination between its check and
        # its write, an operator's zookeeper-shell): the coordinator's watch applies it, new epoch
        pinned = {0: "inst-0", 1: "inst-0", y: "inst-1"}  # y moves back to inst-1
        written = {steering.PINS: ",".join(f"{TOPIC}:{p}={i}" for p, i in sorted(pinned.items())),
                   steering.ISOLATED: "inst-2"}
        with cluster.zk_client() as zk:
            zk.set(group_config_path(GROUP_ID), encode_group_config(written))
        timed(f"a ZooKeeper write applied by coordinator {third}", settled(steered(members, pinned, "inst-2")),
              30, t0)

        # a session timeout set through a broker that does not coordinate the group governs it
        coord = coordinator(cluster)
        elsewhere = next(i for i in cluster.ids if i != coord)
        assert alter(cluster, elsewhere, "consumer.session.timeout.ms", str(GROUP_SESSION_MS)) == (ErrorCode.none, "")
        timed(f"coordinator {coord} describing the group's session timeout",
              lambda: group_configs(cluster, coord)["consumer.session.timeout.ms"][0] == str(GROUP_SESSION_MS),
              10, t0)
        time.sleep(1.5)  # a heartbeat or two, so the members' timers run with the group's timeout
        leaver = members.pop("inst-1")
        leaver.stop()  # a static member leaves (epoch -2): its partitions wait for its session to end
        left = time.monotonic()
        waiting = {p for p, i in pinned.items() if i == "inst-1"}  # a pin without fallback waits for its member
        timed("inst-1's partitions (but its pinned one) given to inst-0",
              lambda: members["inst-0"].owned() == set(range(PARTITIONS)) - waiting, 30, t0)
        waited = time.monotonic() - left
        print(f"inst-1's partitions moved {waited:.1f} s after it left (group session timeout "
              f"{GROUP_SESSION_MS} ms, brokers' default {DEFAULT_SESSION_MS} ms)")
        assert waited < DEFAULT_SESSION_MS / 1000 - 2, waited
    finally:
        for m in members.values():
            m.stop()
    print(f"{time.monotonic() - t0:6.1f} s  done")
