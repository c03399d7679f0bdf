"""The cluster's state as its brokers answer gregor's wire client (not a client under test):
partitions' leaders and ISRs from Metadata, groups' coordinators from FindCoordinator, and a group
id coordinated by a given broker (tests/cluster/test_clients.py and the cluster tests of telemetry
and the lag report)."""

from __future__ import annotations

from typing import Any

from gregor.admin.wire_client import WireClient
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from gregor.protocol.errors import ErrorCode
from tests.support.waiting import wait_for

# the __consumer_offsets partitions of the clusters group_coordinated_by is used on (their
# offsets.topic.num.partitions; tests/cluster/test_clients.py)
CLIENTS_OFFSETS_PARTITIONS = 3


def call(bootstrap: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """One request to the first broker of ``bootstrap`` (host:port,...) that accepts a connection."""
    for address in bootstrap.split(","):
        try:
            wire = WireClient(address, timeout=10)
        except OSError:
            continue
        try:
            return wire.call(api_key, version, body)
        finally:
            wire.close()
    raise AssertionError(f"no broker of {bootstrap} accepts connections")


def leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    """{partition: (leader, isr)}; empty while the topic is unknown."""
    md = call(bootstrap, ApiKey.METADATA, 9, {
        "topics": [{"name": topic}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
    t = md.topics[0]
    return {} if t.error_code else {p.partition_index: (p.leader_id, list(p.isr_nodes)) for p in t.partitions}


def fully_replicated(bootstrap: str, topic: str, partitions: int) -> dict[int, int] | None:
    """{partition: leader} once every partition has a leader and all three replicas in its ISR."""
    st = leaders(bootstrap, topic)
    if len(st) != partitions or any(leader < 0 or len(isr) != 3 for leader, isr in st.values()):
        return None
    return {p: leader for p, (leader, _isr) in st.items()}


def find_coordinator(bootstrap: str, group: str) -> Any:
    return call(bootstrap, ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})


def coordinator_of(bootstrap: str, group: str) -> int:
    r = find_coordinator(bootstrap, group)
    return r.node_id if r.error_code == ErrorCode.none else -1


def group_coordinated_by(bootstrap: str, broker_id: int, prefix: str) -> str:
    """A group id whose coordinator is ``broker_id`` (the leader of its __consumer_offsets
    partition); the first FindCoordinator creates __consumer_offsets."""
    def offsets_topic_ready() -> dict[int, int] | None:
        if find_coordinator(bootstrap, prefix).error_code:
            return None
        return fully_replicated(bootstrap, OFFSETS_TOPIC, CLIENTS_OFFSETS_PARTITIONS)

    offsets_leaders: dict[int, int] = wait_for(offsets_topic_ready, what=f"{OFFSETS_TOPIC} fully replicated")
    group = next(g for g in (f"{prefix}-{i}" for i in range(1000))
                 if offsets_leaders[partition_for(g, CLIENTS_OFFSETS_PARTITIONS)] == broker_id)
    assert wait_for(lambda: (c := coordinator_of(bootstrap, group)) >= 0 and c,
                    what=f"a coordinator for {group}") == broker_id
    return group
