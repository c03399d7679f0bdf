"""Configs changed at run time through the admin APIs (AlterConfigs, IncrementalAlterConfigs):
dynamic broker configs and GROUP config resources, kept in ``<log.dirs>/dynamic-configs.json``
(written atomically; Kafka keeps them in its metadata log) and applied again at start-up.

Broker configs, as Kafka layers them (DynamicBrokerConfig): a per-broker value (resource name =
this node's id) wins over a cluster-wide default (resource name ""), which wins over
``server.properties``/``--override``, which wins over the built-in default. Which keys may change:

- Kafka's dynamic keys that Gregor serves take effect at once: the log defaults of every topic
  without its own override (``log.retention.*``, ``log.segment.bytes``, ``log.cleanup.policy``,
  ``message.max.bytes``, ...) and ``log.cleaner.backoff.ms``.
- Kafka's dynamic keys that Gregor accepts in ``server.properties`` without effect on one node
  (thread pools, cleaner buffers, the SASL listener settings, ...) are accepted and kept the same
  way: stored, described, no effect.
- Anything else, including keys Kafka can change but Gregor reads only at start-up (listeners,
  connection limits), answers INVALID_REQUEST, the error Kafka gives for a non-dynamic key
  (Kafka wraps its ConfigException in InvalidRequestException, KAFKA-13609); an invalid value
  too.

Group configs (Kafka 4.0, KIP-848/932): ``consumer.session.timeout.ms`` and friends, per group id,
valid for any group id (the group need not exist), range-checked against the broker's bounds as
Kafka does. ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` govern the
group's consumer-protocol members (KIP-848) from their next heartbeat on; classic groups are not
governed by them (as in Kafka); the share keys are stored and described only.

In a cluster (``zookeeper.connect``) group configs are the cluster's, not a broker's: ZooKeeper
holds them (``/config/groups/<group id>``) and ``cluster/zk/group_configs.py`` mirrors them into
``groups`` here on every broker and writes the changes (``group_store``). The file then keeps
broker configs only; group configs an older version left in it are moved to ZooKeeper once.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gregor.assignment import steering
from gregor.atomic_file import write_atomically
from gregor.config import KEYS, BrokerConfig, ConfigError
from gregor.log.topic_registry import validate_topic_name
from gregor.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from gregor.cluster.zk.group_configs import ZkGroupConfigs
    from gregor.log.log_manager import LogManager
    from gregor.log.topic_registry import TopicRegistry

log = logging.getLogger(__name__)

FILE = "dynamic-configs.json"

# Kafka's dynamic broker keys that change something on Gregor (topic defaults, the cleaner's pace)
SERVED = frozenset({
    "log.cleanup.policy", "log.retention.ms", "log.retention.minutes", "log.retention.hours",
    "log.retention.bytes", "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.index.size.max.bytes",
    "log.index.interval.bytes", "message.max.bytes", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms", "log.cleaner.min.cleanable.ratio",
    "log.message.timestamp.type", "log.cleaner.backoff.ms",
})
# Kafka's dynamic broker keys that mean nothing on one node (accepted in server.properties too)
_LISTENER_SASL = frozenset({
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "listener.security.protocol.map",
})
INERT = _LISTENER_SASL | frozenset({
    "num.io.threads", "num.network.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads", "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second",
    "compression.type", "min.insync.replicas", "unclean.leader.election.enable", "log.preallocate",
    "metric.reporters", "producer.id.expiration.ms",
})
# Kafka: these may only be set per broker, not as the cluster-wide default
PER_BROKER_ONLY = _LISTENER_SASL
# LIST-type broker keys and their built-in defaults (APPEND starts from those without a value)
BROKER_LIST_DEFAULTS = {"log.cleanup.policy": "delete", "sasl.enabled.mechanisms": "GSSAPI", "metric.reporters": ""}

# Kafka 4.0 GroupConfig: key -> (broker key giving its default, default, broker keys bounding it)
GROUP_KEYS: dict[str, tuple[str, Any, tuple[str, int] | None, tuple[str, int] | None]] = {
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", 45000,
                                    ("group.consumer.min.session.timeout.ms", 45000),
                                    ("group.consumer.max.session.timeout.ms", 60000)),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms", 5000,
                                       ("group.consumer.min.heartbeat.interval.ms", 5000),
                                       ("group.consumer.max.heartbeat.interval.ms", 15000)),
    "share.session.timeout.ms": ("group.share.session.timeout.ms", 45000,
                                 ("group.share.min.session.timeout.ms", 45000),
                                 ("group.share.max.session.timeout.ms", 60000)),
    "share.heartbeat.interval.ms": ("group.share.heartbeat.interval.ms", 5000,
                                    ("group.share.min.heartbeat.interval.ms", 5000),
                                    ("group.share.max.heartbeat.interval.ms", 15000)),
    "share.record.lock.duration.ms": ("group.share.record.lock.duration.ms", 30000,
                                      ("group.share.min.record.lock.duration.ms", 15000),
                                      ("group.share.max.record.lock.duration.ms", 60000)),
    "share.delivery.count.limit": ("group.share.delivery.count.limit", 5, ("", 2), ("", 10)),
    "share.partition.max.record.locks": ("group.share.partition.max.record.locks", 2000, ("", 100),
                                         ("", 10000)),
    "share.auto.offset.reset": ("", "latest", None, None),
    "share.isolation.level": ("", "read_uncommitted", None, None),
    # KIP-1191: where the group's undeliverable records are copied (blank: nowhere)
    "errors.deadletterqueue.topic.name": ("", "", None, None),
    "errors.deadletterqueue.copy.record.enable": ("", "false", None, None),
}
DEAD_LETTER_TOPIC = "errors.deadletterqueue.topic.name"
# the values a string group config may take
GROUP_CHOICES = {"share.auto.offset.reset": ("latest", "earliest"),
                 "share.isolation.level": ("read_uncommitted", "read_committed"),
                 "errors.deadletterqueue.copy.record.enable": ("true", "false")}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class DynamicConfigs:
    """Alters ``config`` in place and re-applies topic defaults to ``logs``."""

    def __init__(self, config: BrokerConfig, node_id: int, logs: LogManager, registry: TopicRegistry) -> None:
        self.config = config
        self.node_id = node_id
        self.logs = logs
        self.registry = registry
        self.path: Path = config.data_dir / FILE
        self.static: dict[str, Any] = dict(config.values)  # server.properties and --override
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}
        self.groups: dict[str, dict[str, str]] = {}
        # in a cluster: ZooKeeper holds the group configs (``groups`` mirrors them; the store writes
        # them), and groups found in the file are moved there once (``file_groups``)
        self.groups_in_zookeeper = bool(config["zookeeper.connect"])
        self.group_store: ZkGroupConfigs | None = None
        self.file_groups: dict[str, dict[str, str]] = {}
        self._group_defaults: dict[str, Any] | None = None  # built once per broker-config change

    # -- persistence -------------------------------------------------------------------------
    def load(self) -> None:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read {self.path}: {e}") from None
        self.per_broker = {str(k): str(v) for k, v in raw.get("broker", {}).items()}
        self.cluster_default = {str(k): str(v) for k, v in raw.get("cluster_default", {}).items()}
        groups = {str(g): {str(k): str(v) for k, v in c.items()} for g, c in raw.get("groups", {}).items()}
        if self.groups_in_zookeeper:
            self.file_groups = groups
        else:
            self.groups = groups
        for layer in (self.cluster_default, self.per_broker):
            for key in list(layer):  # a key this version no longer changes at run time: skipped, as Kafka
                try:                 # skips dynamic values it cannot apply
                    self._resolve({key: layer[key]}, {})
                except KafkaError as e:
                    log.warning("%s: ignoring %s=%s: %s", self.path, key, layer.pop(key), e.message)
        self._apply(self._resolve(self.cluster_default, self.per_broker))
        if self.per_broker or self.cluster_default:
            log.info("dynamic broker configs from %s: %s", self.path,
                     {**self.cluster_default, **self.per_broker})

    def _save(self) -> None:
        groups = self.file_groups if self.groups_in_zookeeper else self.groups
        data = {"version": 1, "broker": self.per_broker, "cluster_default": self.cluster_default,
                "groups": {g: c for g, c in groups.items() if c}}
        write_atomically(self.path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())

    # -- broker configs ----------------------------------------------------------------------
    def layer(self, resource_name: str) -> dict[str, str]:
        if resource_name == "":
            return self.cluster_default
        if resource_name == str(self.node_id):
            return self.per_broker
        raise KafkaError(ErrorCode.invalid_request, f"unknown broker '{resource_name}'")

    def source_of(self, key: str) -> int:
        """Kafka's ConfigSource of a broker key's current value."""
        if key in self.per_broker:
            return 2  # DYNAMIC_BROKER_CONFIG
        if key in self.cluster_default:
            return 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
        if key in self.static or key in self.config.ignored:
            return 4  # STATIC_BROKER_CONFIG
        return 5  # DEFAULT_CONFIG

    def alter_broker(self, resource_name: str, entries: list[tuple[str, str | None, int]], incremental: bool,
                     validate_only: bool) -> None:
        current = self.layer(resource_name)
        new = dict(current) if incremental else {}
        for key, value, op in entries:
            if key not in SERVED and key not in INERT:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"{key} cannot be changed at run time (set it in server.properties or --override "
                                 f"and restart)")
            if resource_name == "" and key in PER_BROKER_ONLY:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"{key} can only be set per broker: give the broker id as the resource name")
            if op == DELETE:
                new.pop(key, None)
            elif op == SET:
                if value is None:
                    raise KafkaError(ErrorCode.invalid_request, f"null value for {key}")
                new[key] = value
            elif op in (APPEND, SUBTRACT):
                new[key] = apply_list_op(key, op, value, new.get(key), BROKER_LIST_DEFAULTS)
            else:
                raise KafkaError(ErrorCode.invalid_request, f"unknown config operation {op} on {key}")
        layers = (new, self.per_broker) if resource_name == "" else (self.cluster_default, new)
        values = self._resolve(*layers)  # validates every value before anything changes
        if validate_only:
            return
        old = dict(current)
        current.clear()
        current.update(new)
        try:
            self._save()
        except OSError as e:
            current.clear()
            current.update(old)
            raise KafkaError(ErrorCode.kafka_storage_error, f"cannot save {self.path.name}: {e}") from None
        self._apply(values)
        log.info("dynamic broker configs (%s) now %s", resource_name or "cluster default", new)

    def _resolve(self, cluster_default: dict[str, str], per_broker: dict[str, str]) -> dict[str, Any]:
        """The effective parsed values of the served keys: static values with the dynamic layers on top."""
        values = dict(self.static)
        for layer in (cluster_default, per_broker):
            for key, raw in layer.items():
                if key in INERT:
                    continue
                if key not in SERVED:
                    raise KafkaError(ErrorCode.invalid_request, f"{key} cannot be changed at run time")
                try:
                    values[key] = KEYS[key].parse(raw)
                except (ValueError, ConfigError) as e:
                    raise KafkaError(ErrorCode.invalid_request, f"invalid value {raw!r} for {key}: {e}") from None
        check = BrokerConfig(values=values)
        if check.retention_ms < -1 or check.roll_ms < 1:
            raise KafkaError(ErrorCode.invalid_request, "invalid retention or roll time")
        return values

    def _apply(self, values: dict[str, Any]) -> None:
        cfg = self.config
        self._group_defaults = None
        cfg.values.clear()
        cfg.values.update(values)
        logs = self.logs
        logs.defaults = cfg.topic_defaults()
        for topic in list(self.registry.by_name.values()):
            logs.reconfigure(topic)

    def dynamic_value(self, key: str) -> str | None:
        return self.per_broker.get(key, self.cluster_default.get(key))

    def described_inert(self, keys: list[str] | None) -> list[tuple[str, str, int]]:
        """Inert keys set dynamically: (key, value, source), for DescribeConfigs."""
        out = []
        for key in sorted(set(self.per_broker) | set(self.cluster_default)):
            if key in INERT and (keys is None or key in keys):
                value = self.dynamic_value(key)
                assert value is not None
                out.append((key, value, self.source_of(key)))
        return out

    # -- group configs -----------------------------------------------------------------------
    def _broker_value(self, key: str, default: int) -> int:
        """A broker key Gregor knows (group.consumer.*), or one it only accepts (group.share.*)."""
        if not key:
            return default  # a fixed bound
        if key in KEYS:
            return int(self.config[key])
        return _as_int(self.config.ignored.get(key), default)

    def group_defaults(self) -> dict[str, Any]:
        """Every group's values before its own overrides: the broker's group.* keys (a fresh
        dict; the broker's values are read again only after its configuration changes)."""
        if self._group_defaults is None:
            out: dict[str, Any] = {}
            for key, (broker_key, default, _lo, _hi) in GROUP_KEYS.items():
                out[key] = self._broker_value(broker_key, default) if isinstance(default, int) else default
            out.update({steering.PINS: "", steering.ISOLATED: "", steering.FROZEN: "false"})
            self._group_defaults = out
        return dict(self._group_defaults)

    def group_config(self, group_id: str) -> tuple[dict[str, Any], dict[str, str]]:
        """(effective values, overrides) of a group (read on every consumer-protocol heartbeat)."""
        overrides = self.groups.get(group_id, {})
        values = self.group_defaults()
        if overrides:
            values.update(overrides)
        return values, overrides

    def _dead_letter_topic(self, name: str) -> str:
        """A share group's dead-letter topic as set: blank, or a legal topic name that is not
        internal and has the cluster's prefix (errors.deadletterqueue.topic.name.prefix); whether
        the topic allows it is checked when a record is dead-lettered, as Kafka."""
        if not name:
            return ""
        try:
            validate_topic_name(name)
        except KafkaError as e:
            raise KafkaError(ErrorCode.invalid_config, f"{DEAD_LETTER_TOPIC}: {e.message}") from None
        if name.startswith("__"):
            raise KafkaError(ErrorCode.invalid_config, f"{DEAD_LETTER_TOPIC}: {name!r} starts with __")
        prefix = str(self.config["errors.deadletterqueue.topic.name.prefix"])
        if prefix and not name.startswith(prefix):
            raise KafkaError(ErrorCode.invalid_config, f"{DEAD_LETTER_TOPIC}: {name!r} does not start with {prefix!r} "
                             "(errors.deadletterqueue.topic.name.prefix)")
        return name

    def preview_group(self, group_id: str, entries: list[tuple[str, str | None, int]],
                      current: dict[str, str] | None = None) -> dict[str, str]:
        """The group's overrides after ``entries`` (key, value, operation) applied to ``current``
        (default: the overrides known here), checked, not saved. Steering keys
        (gregor.assignment.*) are read here for their syntax only; whether they fit the group (its
        members, the topics) is the coordinator's to say."""
        if not group_id:
            raise KafkaError(ErrorCode.invalid_request, "the group id must not be empty")
        new = dict(self.groups.get(group_id, {}) if current is None else current)
        for key, value, op in entries:
            if key in steering.KEYS:
                self._steering_entry(new, key, value, op)
                continue
            spec = GROUP_KEYS.get(key)
            if spec is None:
                raise KafkaError(ErrorCode.invalid_config, f"unknown group config {key!r}")
            if op == DELETE:
                new.pop(key, None)
                continue
            if op != SET:
                raise KafkaError(ErrorCode.invalid_config, f"config {key} is not a list: only SET and DELETE apply")
            _broker_key, default, lo, hi = spec
            if isinstance(default, int):
                try:
                    n = int(str(value))
                except ValueError:
                    raise KafkaError(ErrorCode.invalid_config, f"invalid value {value!r} for {key}") from None
                low = self._broker_value(*lo) if lo else None
                high = self._broker_value(*hi) if hi else None
                if (low is not None and n < low) or (high is not None and n > high):
                    raise KafkaError(ErrorCode.invalid_config,
                                     f"{key} must be between {low} and {high} (the broker's bounds), got {n}")
                new[key] = str(n)
            elif key == DEAD_LETTER_TOPIC:
                new[key] = self._dead_letter_topic(str(value or "").strip())
            else:
                if value not in GROUP_CHOICES[key]:
                    raise KafkaError(ErrorCode.invalid_config, f"{key} must be {' or '.join(GROUP_CHOICES[key])}")
                new[key] = value
        try:
            steering.Steering.from_config(new)
        except steering.SteeringError as e:
            raise KafkaError(ErrorCode.invalid_config, str(e)) from None
        return new

    @staticmethod
    def _steering_entry(new: dict[str, str], key: str, value: str | None, op: int) -> None:
        try:
            new[key] = steering.apply_operation(new.get(key, ""), key, op, value)
        except steering.SteeringError as e:
            raise KafkaError(ErrorCode.invalid_config, str(e)) from None
        if not new[key] and (key in steering.LIST_KEYS or op == DELETE):
            new.pop(key, None)

    def alter_group(self, group_id: str, entries: list[tuple[str, str | None, int]], validate_only: bool) -> None:
        new = self.preview_group(group_id, entries)
        if validate_only:
            return
        self.save_group(group_id, new)

    def save_group(self, group_id: str, new: dict[str, str]) -> None:
        """One node: the group's overrides, saved in the file (in a cluster the store writes
        ZooKeeper, and ``mirror_group`` takes what it holds)."""
        if self.groups_in_zookeeper:
            raise KafkaError(ErrorCode.unknown_server_error,
                             "group configs of a cluster are kept in ZooKeeper, not in this broker's file")
        old = self.groups.get(group_id)
        self.groups[group_id] = new
        try:
            self._save()
        except OSError as e:
            if old is None:
                del self.groups[group_id]
            else:
                self.groups[group_id] = old
            raise KafkaError(ErrorCode.kafka_storage_error, f"cannot save {self.path.name}: {e}") from None

    async def refresh_group(self, group_id: str) -> None:
        """In a cluster: the group's overrides read from ZooKeeper now (see ZkGroupConfigs.refresh);
        on one node they are always current. A failure leaves what this broker mirrors."""
        if self.group_store is None:
            return
        try:
            await self.group_store.refresh(group_id)
        except Exception as e:  # noqa: BLE001 - ZooKeeper away: the mirror stands
            log.warning("group %s: its configs could not be read from ZooKeeper now (%s); using the ones "
                        "mirrored here", group_id, e)

    def mirror_group(self, group_id: str, overrides: dict[str, str]) -> None:
        """In a cluster: the group's overrides as ZooKeeper holds them (nothing saved here)."""
        if overrides:
            self.groups[group_id] = dict(overrides)
        else:
            self.groups.pop(group_id, None)

    def usable_group_overrides(self, group_id: str, overrides: dict[str, str]) -> tuple[dict[str, str], list[str]]:
        """Overrides written by another broker or by hand, checked as an alter would check them:
        (those that pass, why each other one does not). A broker with narrower bounds than the
        writer's thus ignores a value it could not have accepted itself, rather than fail on it."""
        try:
            return self.preview_group(group_id, [(k, v, SET) for k, v in overrides.items()], {}), []
        except KafkaError:
            pass
        kept: dict[str, str] = {}
        problems = []
        for key, value in overrides.items():
            try:
                kept = self.preview_group(group_id, [(key, value, SET)], kept)
            except KafkaError as e:
                problems.append(f"{key}={value}: {e.message}")
        return kept, problems

    def forget_file_groups(self) -> None:
        """In a cluster, once the file's group configs are in ZooKeeper: the file keeps none."""
        if self.file_groups:
            self.file_groups = {}
            self._save()


def steering_part(overrides: dict[str, str]) -> dict[str, str]:
    """A group's steering overrides (gregor.assignment.*)."""
    return {k: v for k, v in overrides.items() if k in steering.KEYS}


def _as_int(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


def apply_list_op(key: str, op: int, value: str | None, current: Any, list_defaults: dict[str, str]) -> str:
    """IncrementalAlterConfigs APPEND (2) / SUBTRACT (3) on a LIST config, as Kafka does: APPEND adds
    the items missing from the override (or from the default without one), SUBTRACT removes items
    from the override; any other config is INVALID_CONFIG."""
    if key not in list_defaults:
        raise KafkaError(ErrorCode.invalid_config,
                         f"config {key} is not a list: {'APPEND' if op == 2 else 'SUBTRACT'} is not allowed")
    items = [i for i in str(value or "").split(",") if i]
    if current is None:
        old = [i for i in (list_defaults[key].split(",") if op == 2 else []) if i]
    else:
        old = [i for i in str(current).split(",") if i]
    if op == 2:
        merged = old + [i for i in items if i not in old]
    else:
        merged = [i for i in old if i not in items]
    return ",".join(dict.fromkeys(merged))
