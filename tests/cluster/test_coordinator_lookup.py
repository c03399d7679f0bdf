"""FindCoordinator and ``gregor groups coordinator`` in a cluster, with real brokers over ZooKeeper:
every reason a group has no coordinator is said in words, to the client (FindCoordinator's error
message), to the operator's CLI and once, not per request, in the broker log."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gregor.admin.wire_client import WireClient
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from gregor.protocol.errors import ErrorCode
from tests.support.cluster import BrokerCluster
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

GROUP = "billing"


def find_coordinator(bootstrap: str, group: str = GROUP, version: int = 3):
    wire = WireClient(bootstrap)
    try:
        return wire.call(ApiKey.FIND_COORDINATOR, version, {"key": group, "key_type": 0})
    finally:
        wire.close()


def cli_coordinator(bootstrap: str, group: str = GROUP) -> tuple[int, dict]:
    out = subprocess.run([sys.executable, "-m", "gregor", "groups", "coordinator", group, "--json",
                          "--bootstrap-server", bootstrap], capture_output=True, text=True, timeout=60)
    return out.returncode, json.loads(out.stdout)


@pytest.fixture
def cluster(tmp_path, zookeeper):
    c = BrokerCluster(tmp_path / "cluster", zookeeper, size=3,
                      overrides={"offsets.topic.num.partitions": "6", "group.initial.rebalance.delay.ms": "0"})
    yield c
    c.kill_all()


def test_offsets_topic_waits_for_its_replication_factor_and_says_so(cluster) -> None:
    """One broker of three started, offsets.topic.replication.factor at Kafka's default of 3: no
    coordinator, and every lookup says exactly why; the broker logs it once. The two others
    start: the topic is created and the group has a coordinator."""
    b1 = cluster.start_broker(1)
    for _ in range(30):
        r = find_coordinator(b1.bootstrap)
        assert r.error_code == ErrorCode.coordinator_not_available
    assert r.error_message.startswith("offsets topic needs 3 live brokers (offsets.topic.replication.factor=3), "
                                      "1 registered: 1")
    assert r.node_id == -1
    code, info = cli_coordinator(b1.bootstrap)
    assert code == 1 and info["status"] == "unavailable"
    assert "offsets topic needs 3 live brokers" in info["reason"]
    assert b1.log_path.read_text().count("offsets topic needs 3 live brokers") == 1

    cluster.start_broker(2)
    cluster.start_broker(3)
    cluster.wait_formed()
    r = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(find_coordinator(b1.bootstrap)), 60,
                 "a coordinator once three brokers are alive")
    p = partition_for(GROUP, 6)
    code, info = wait_for(lambda: (lambda c: c if c[0] == 0 else None)(cli_coordinator(cluster.bootstrap)), 60,
                          "the CLI to see the group served")
    assert info["partition"] == p and info["coordinator"] == r.node_id == info["partition_leader"]
    assert sorted(info["replicas"]) == ["1 (alive)", "2 (alive)", "3 (alive)"]
    assert info["reason"].startswith(f"served by broker {r.node_id}, the leader of {OFFSETS_TOPIC}-{p}")


def test_cli_asks_any_bootstrap_broker_and_marks_offline_replicas(cluster) -> None:
    """The first bootstrap broker is dead: the CLI asks the next; the dead replica is marked."""
    cluster.start()
    wait_for(lambda: find_coordinator(cluster.broker(1).bootstrap).error_code == 0, 60, "a coordinator")
    code, info = wait_for(lambda: (lambda c: c if c[0] == 0 else None)(cli_coordinator(cluster.bootstrap)), 60,
                          "the CLI to see the group served")
    victim = next(b for b in cluster.ids if b != info["coordinator"])
    cluster.kill(victim)
    bootstrap = ",".join([cluster.broker(victim).bootstrap]
                         + [cluster.broker(b).bootstrap for b in cluster.ids if b != victim])

    def offline_seen():
        code, info = cli_coordinator(bootstrap)
        return (code, info) if f"{victim} (offline)" in info.get("replicas", []) else None

    code, info = wait_for(offline_seen, 60, f"broker {victim} shown offline")
    assert code == 0 and info["status"] == "loaded"
    assert victim not in info["live_brokers"]
