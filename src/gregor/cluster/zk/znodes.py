"""Kafka's ZooKeeper layout: the paths and the JSON of each node, as Kafka 2.8 writes them, so
that Kafka's own ZooKeeper tools (zookeeper-shell, kafka-topics --zookeeper of old) read a Gregor
cluster's state, and so that the data a Gregor broker writes means what it means in Kafka.

Every function here is pure: bytes in, values out (or the reverse). Decoders are strict about
what they need and ignore fields they do not know (newer versions add fields)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from gregor.security.listeners import Listener

NO_LEADER = -1  # LeaderAndIsr.NoLeader

BROKERS_IDS = "/brokers/ids"
BROKERS_TOPICS = "/brokers/topics"
BROKERS_SEQID = "/brokers/seqid"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
CLUSTER_ID = "/cluster/id"

# the persistent paths a Kafka broker creates at start-up (KafkaZkClient.createTopLevelPaths)
PERSISTENT_PATHS = ("/consumers", BROKERS_IDS, BROKERS_TOPICS, CONFIG_CHANGES, "/config/clients",
                    CONFIG_TOPICS, "/config/users", "/config/brokers", "/admin/delete_topics",
                    "/brokers/seqid", ISR_CHANGE_NOTIFICATION, "/latest_producer_id_block",
                    "/log_dir_event_notification")


class ZnodeFormatError(ValueError):
    """A node's data is not what Kafka writes there."""


def _json(data: bytes | None, path: str) -> Any:
    if not data:
        raise ZnodeFormatError(f"{path}: empty node")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ZnodeFormatError(f"{path}: not JSON ({e})") from None


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _now_ms() -> str:
    return str(int(time.time() * 1000))


# -- /brokers/ids/<id> -----------------------------------------------------------------------
def broker_path(broker_id: int) -> str:
    return f"{BROKERS_IDS}/{broker_id}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """Kafka's broker registration (version 5): every advertised listener as an endpoint, with
    the listeners' security protocols. ``host``/``port`` are the endpoint of the inter-broker
    listener (the one brokers connect to each other on)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    listener_name: str = "PLAINTEXT"
    endpoints: tuple[Listener, ...] = ()

    def encode(self) -> bytes:
        endpoints = self.endpoints or (Listener(self.listener_name, "PLAINTEXT", self.host, self.port),)
        plaintext = next((e for e in endpoints if e.protocol == "PLAINTEXT"), None)
        return _dump({
            "features": {}, "listener_security_protocol_map": {e.name: e.protocol for e in endpoints},
            "endpoints": [str(e) for e in endpoints], "jmx_port": -1,
            # the legacy fields name the PLAINTEXT endpoint, as Kafka's (none: null and -1)
            "port": plaintext.port if plaintext else -1, "host": plaintext.host if plaintext else None,
            "version": 5, "timestamp": _now_ms(), "rack": self.rack,
        })

    @staticmethod
    def decode(broker_id: int, data: bytes | None, inter_broker: str | None = None) -> BrokerRegistration:
        """``inter_broker``: the inter-broker listener's name (the same on every broker); its
        endpoint is ``host``/``port`` (the first endpoint when it has none of that name)."""
        path = broker_path(broker_id)
        obj = _json(data, path)
        rack = obj.get("rack")
        protocols = obj.get("listener_security_protocol_map") or {}
        endpoints: list[Listener] = []
        for raw in obj.get("endpoints") or []:
            name, _, hostport = str(raw).partition("://")
            host, _, port = hostport.rpartition(":")
            if not name or not port.isdigit():
                raise ZnodeFormatError(f"{path}: endpoint {raw!r} is not NAME://host:port")
            endpoints.append(Listener(name, str(protocols.get(name, name)), host.strip("[]"), int(port)))
        if endpoints:
            chosen = next((e for e in endpoints if e.name == inter_broker), endpoints[0])
            return BrokerRegistration(broker_id, chosen.host, chosen.port, rack, chosen.name, tuple(endpoints))
        if "host" in obj and "port" in obj:
            return BrokerRegistration(broker_id, str(obj["host"]), int(obj["port"]), rack)
        raise ZnodeFormatError(f"{path}: no endpoint")


# -- /controller, /controller_epoch --------------------------------------------------------------
def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes | None) -> int:
    """The controller's broker id (-1 for an empty node)."""
    if not data:
        return -1
    raw = data.strip()
    if raw.isdigit():  # very old Kafka wrote the bare id
        return int(raw)
    obj = _json(data, CONTROLLER)
    return int(obj["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").strip())
    except ValueError:
        raise ZnodeFormatError(f"{CONTROLLER_EPOCH}: {data!r} is not an integer") from None


# -- /brokers/topics/<t> -----------------------------------------------------------------------
def topic_path(topic: str) -> str:
    return f"{BROKERS_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKERS_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKERS_TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{BROKERS_TOPICS}/{topic}/partitions/{partition}/state"


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        raise ZnodeFormatError(f"topic id {text!r} is not a base64 UUID") from None


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's replica assignment: partition -> replicas, the first being the preferred leader."""
    topic: str
    partitions: dict[int, list[int]]
    topic_id: uuid.UUID | None = None

    def encode(self) -> bytes:
        obj: dict[str, Any] = {"version": 2 if self.topic_id is not None else 1,
                               "partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())},
                               "adding_replicas": {}, "removing_replicas": {}}
        if self.topic_id is not None:
            obj["topic_id"] = encode_topic_id(self.topic_id)
        return _dump(obj)

    @staticmethod
    def decode(topic: str, data: bytes | None) -> TopicAssignment:
        path = topic_path(topic)
        obj = _json(data, path)
        try:
            parts = {int(p): [int(r) for r in replicas] for p, replicas in obj["partitions"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ZnodeFormatError(f"{path}: no valid 'partitions' map") from None
        tid = obj.get("topic_id")
        return TopicAssignment(topic, parts, decode_topic_id(tid) if tid else None)


# -- /brokers/topics/<t>/partitions/<p>/state ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PartitionState:
    """LeaderIsrAndControllerEpoch: who leads, since which leader epoch, the ISR, and the epoch of
    the controller that wrote it. ``zk_version`` is the node's version when read (-1: not read),
    the condition of the next write; ``mzxid`` the zxid of the write that made it (-1: unknown),
    which a broker compares with its registration's (its broker epoch): a leadership written
    before the broker registered is not the controller's word to this registration."""
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    zk_version: int = field(default=-1, compare=False)
    mzxid: int = field(default=-1, compare=False)

    def encode(self) -> bytes:
        return _dump({"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                      "leader_epoch": self.leader_epoch, "isr": list(self.isr)})

    @staticmethod
    def decode(data: bytes | None, zk_version: int = -1, path: str = "partition state",
               mzxid: int = -1) -> PartitionState:
        obj = _json(data, path)
        try:
            return PartitionState(int(obj["leader"]), int(obj["leader_epoch"]), [int(r) for r in obj["isr"]],
                                  int(obj["controller_epoch"]), zk_version, mzxid)
        except (KeyError, TypeError, ValueError):
            raise ZnodeFormatError(f"{path}: not a partition state: {data!r}") from None

    def with_leader(self, leader: int, isr: list[int], controller_epoch: int) -> PartitionState:
        """A controller's change: leader and ISR, next leader epoch (Kafka's newLeaderAndIsr)."""
        return PartitionState(leader, self.leader_epoch + 1, isr, controller_epoch, self.zk_version)

    def with_isr(self, isr: list[int]) -> PartitionState:
        """A leader's ISR change: same leader and leader epoch."""
        return PartitionState(self.leader, self.leader_epoch, isr, self.controller_epoch, self.zk_version)

    def written(self, zk_version: int, mzxid: int) -> PartitionState:
        """This state as written, with the node's new version and zxid."""
        return PartitionState(self.leader, self.leader_epoch, list(self.isr), self.controller_epoch, zk_version,
                              mzxid)


# -- /config/topics/<t>, /admin/delete_topics/<t>, /cluster/id -------------------------------------
def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def encode_topic_config(config: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": {k: str(v) for k, v in sorted(config.items())}})


def decode_topic_config(topic: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    obj = _json(data, topic_config_path(topic))
    cfg = obj.get("config") or {}
    if not isinstance(cfg, dict):
        raise ZnodeFormatError(f"{topic_config_path(topic)}: 'config' is not a map")
    return {str(k): str(v) for k, v in cfg.items()}


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    return str(_json(data, CLUSTER_ID)["id"])
