"""Broker configuration with Kafka's key names, defaults and validation.

``BrokerConfig.from_sources(properties_file, overrides)`` reads a ``server.properties`` file and
``--override key=value`` pairs; every key is checked against the table below, every value parsed
and range-checked. Keys that Kafka defines but that mean nothing on Gregor's single node
(replication, thread pools, socket buffers, ZooKeeper/KRaft settings) are accepted so that a stock
Kafka ``server.properties`` works, and are listed by ``ignored``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from gregor.security.listeners import ListenerConfigError, Listeners, parse_listeners, protocol_map

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    """An unknown key or an invalid value; the message names the key."""


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError("expected true or false")


def _int_range(lo: int, hi: int) -> Callable[[str], int]:
    def parse(v: str) -> int:
        n = int(v.strip())
        if not lo <= n <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return n

    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(v: str) -> str:
        s = v.strip()
        if s not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return s

    return parse


def _commit_acks(v: str) -> int:
    n = int(v)
    if n not in (-1, 1):
        raise ValueError("must be -1 (every ISR replica) or 1 (the leader)")
    return n


# replica.selector.class values (KIP-392), by Kafka's class names; replication/replica_selector.py
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _replica_selector(v: str) -> str:
    s = v.strip()
    for full in (LEADER_SELECTOR, RACK_AWARE_SELECTOR):
        if s in (full, full.rsplit(".", 1)[1]):
            return full
    raise ValueError(f"must be one of {LEADER_SELECTOR}, {RACK_AWARE_SELECTOR} (or their simple names)")


REBALANCE_PROTOCOLS = ("classic", "consumer", "share")
CONSUMER_ASSIGNORS = ("uniform", "range")
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def _names_of(allowed: tuple[str, ...], what: str, required: str | None = None) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of names out of ``allowed``, in the given order, without repeats."""

    def parse(v: str) -> tuple[str, ...]:
        parts = [p.strip().lower() for p in v.split(",") if p.strip()]
        unknown = [p for p in parts if p not in allowed]
        if not parts or unknown:
            raise ValueError(f"must be a list of {what} out of {', '.join(allowed)}"
                             + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
        if required is not None and required not in parts:
            raise ValueError(f"must include {required}")
        return tuple(dict.fromkeys(parts))

    return parse


def _one_of(allowed: tuple[str, ...]) -> Callable[[str], str]:
    def parse(v: str) -> str:
        s = v.strip().lower()
        if s not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return s

    return parse


def _cleanup_policy(v: str) -> str:
    parts = [p.strip() for p in v.split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError("must be delete, compact or delete,compact")
    return ",".join(sorted(set(parts), key=parts.index))


def _listeners(v: str) -> str:
    for item in v.split(","):
        if not re.fullmatch(r"\s*[A-Za-z_][A-Za-z0-9_]*://[^:,\s]*:\d+\s*", item):
            raise ValueError(f"{item.strip()!r} is not NAME://host:port")
        port = int(item.rsplit(":", 1)[1])
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} out of range")
    return v.strip()


def parse_http_listener(value: str) -> tuple[str, int]:
    u = urlparse(value if "://" in value else f"http://{value}")
    if u.scheme != "http" or not u.hostname or u.port is None:
        raise ValueError(f"metrics.listener {value!r}: expected http://host:port")
    return u.hostname, u.port


def _metrics_listener(v: str) -> str:
    s = v.strip()
    if s:
        parse_http_listener(s)
    return s


def _ip_overrides(v: str) -> str:
    """``host:count,host:count`` (Kafka's max.connections.per.ip.overrides); kept as the string."""
    for item in v.split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host or not re.fullmatch(r"[A-Za-z0-9._:\[\]-]+", host):
            raise ValueError(f"{item.strip()!r} is not host:count")
        if not count.strip().isdigit() or int(count) > INT_MAX:
            raise ValueError(f"{item.strip()!r}: the count must be a number from 0 to {INT_MAX}")
    return v.strip()


def ip_overrides(v: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in v.split(","):
        if item.strip():
            host, _, count = item.strip().rpartition(":")
            out[host.strip("[]")] = int(count)
    return out


def _zk_connect(v: str) -> str:
    """host:port[,host:port...][/chroot], as Kafka's zookeeper.connect."""
    hosts, _, chroot = v.strip().partition("/")
    if not hosts:
        raise ValueError("expected host:port[,host:port...][/chroot]")
    for hp in hosts.split(","):
        host, sep, port = hp.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{hp.strip()!r} is not host:port")
    if chroot and (chroot.endswith("/") or "//" in chroot):
        raise ValueError(f"chroot /{chroot} is not a valid ZooKeeper path")
    return v.strip()


def _text(v: str) -> str:
    return v.strip()


def _csv_upper(v: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.strip().upper() for p in v.split(",") if p.strip()))


def _csv(v: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.strip() for p in v.split(",") if p.strip()))


def _protocol_map(v: str) -> str:
    try:
        protocol_map(v)
    except ListenerConfigError as e:
        raise ValueError(str(e)) from None
    return v.strip()


def _store_type(v: str) -> str:
    s = v.strip().upper()
    if s not in ("PEM", "PKCS12", "JKS"):
        raise ValueError("must be PEM, PKCS12 or JKS (JKS is accepted in configs but cannot be read here: "
                         "convert it with keytool -importkeystore -deststoretype PKCS12)")
    return s


def _tls_versions(v: str) -> tuple[str, ...]:
    parts = _csv(v)
    bad = [p for p in parts if p not in ("TLSv1.2", "TLSv1.3")]
    if not parts or bad:
        raise ValueError("must list TLSv1.2 and/or TLSv1.3 (older TLS versions are not served)")
    return parts


AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
               "kafka.security.auth.SimpleAclAuthorizer")


def _authorizer(v: str) -> str:
    s = v.strip()
    if s and s not in AUTHORIZERS:
        raise ValueError(f"must be empty (no authorization) or one of Kafka's authorizers: {', '.join(AUTHORIZERS)} "
                         "(each is Kafka's ACL semantics here)")
    return s


def _nonempty(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be empty")
    return v.strip()


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    applies: bool = True  # False: accepted for compatibility, has no effect on one node


_POS_LONG = _int_range(0, LONG_MAX)
_POS_INT = _int_range(0, INT_MAX)

KEYS: dict[str, Key] = {
    k.name: k
    for k in [
        Key("listeners", _listeners, "PLAINTEXT://127.0.0.1:9092", "where the broker listens"),
        Key("advertised.listeners", _listeners, None, "what Metadata tells clients (default: listeners)"),
        Key("log.dirs", _nonempty, None, "data directory (one directory on this broker)"),
        Key("log.dir", _nonempty, "./gregor-data", "data directory when log.dirs is not set"),
        Key("node.id", _int_range(0, INT_MAX), 0, "this broker's id"),
        Key("broker.id", _int_range(-1, INT_MAX), None, "alias of node.id"),
        Key("cluster.id", _nonempty, None, "cluster id (default: generated once and kept in meta.properties)"),
        Key("num.partitions", _int_range(1, 100_000), 1, "partitions of auto-created topics"),
        Key("auto.create.topics.enable", _bool, True, "create topics on first Metadata/Produce"),
        Key("delete.topic.enable", _bool, True, "allow DeleteTopics"),
        Key("message.max.bytes", _int_range(0, INT_MAX), 1048588, "largest record batch accepted"),
        Key("socket.request.max.bytes", _int_range(1, INT_MAX), 104857600, "largest request frame"),
        Key("queued.max.request.bytes", _int_range(-1, LONG_MAX), -1,
            "bytes of requests read but not yet answered, all connections together, before reading"
            " pauses (-1: no limit)"),
        Key("connections.max.idle.ms", _int_range(-(2**63), LONG_MAX), 600000,
            "close connections with no traffic for this long (negative: never)"),
        Key("max.connections", _POS_INT, INT_MAX, "connections served at once; further ones wait unread"),
        # -- security (docs/security.md): listeners, TLS, SASL, Kafka's keys and defaults ---------------
        Key("listener.security.protocol.map", _protocol_map, None,
            "NAME:PROTOCOL per listener (default: PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL map to themselves)"),
        Key("inter.broker.listener.name", _text, None, "the listener brokers connect to each other on"),
        Key("security.inter.broker.protocol", _choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), None,
            "the inter-broker listener by protocol (default PLAINTEXT), when inter.broker.listener.name is not set"),
        Key("sasl.enabled.mechanisms", _csv_upper, ("GSSAPI",),
            "SASL mechanisms served (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; Kafka's default GSSAPI "
            "is not served)"),
        Key("sasl.server.callback.handler.class", _text, None,
            "OAUTHBEARER's token validator as package.module:function (per listener and mechanism as "
            "listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class)"),
        Key("sasl.mechanism.inter.broker.protocol", _text, "GSSAPI",
            "the SASL mechanism a broker authenticates to the others with"),
        Key("sasl.jaas.config", _text, None,
            "JAAS login module configuration (Kafka's form; per listener and mechanism as "
            "listener.name.<listener>.<mechanism>.sasl.jaas.config)"),
        Key("sasl.server.max.receive.size", _int_range(1, INT_MAX), 524288,
            "the largest SASL token accepted before authentication"),
        Key("connections.max.reauth.ms", _POS_LONG, 0,
            "KIP-368: a SASL session's lifetime; a client re-authenticates before it ends or is disconnected "
            "(0: sessions do not expire)"),
        Key("connection.failed.authentication.delay.ms", _POS_INT, 100,
            "how long a failed authentication's answer (and the close that follows) is delayed"),
        Key("ssl.keystore.type", _store_type, "JKS", "PEM or PKCS12 (JKS must be converted)"),
        Key("ssl.keystore.location", _text, None, "the server's certificate chain and private key"),
        Key("ssl.keystore.password", _text, None, "the PKCS12 keystore's password"),
        Key("ssl.key.password", _text, None, "the password of an encrypted private key"),
        Key("ssl.keystore.certificate.chain", _text, None, "PEM certificate chain given inline"),
        Key("ssl.keystore.key", _text, None, "PEM private key given inline"),
        Key("ssl.truststore.type", _store_type, "JKS", "PEM or PKCS12"),
        Key("ssl.truststore.location", _text, None, "the certificates (CAs) peers are verified against"),
        Key("ssl.truststore.password", _text, None, "the PKCS12 truststore's password"),
        Key("ssl.truststore.certificates", _text, None, "PEM trusted certificates given inline"),
        Key("ssl.client.auth", _choice("none", "requested", "required"), "none",
            "whether TLS clients must (required) or may (requested) present a certificate"),
        Key("ssl.enabled.protocols", _tls_versions, ("TLSv1.2", "TLSv1.3"), "TLS versions served"),
        Key("ssl.protocol", _text, "TLSv1.3", "accepted for compatibility (ssl.enabled.protocols decides)",
            applies=False),
        Key("ssl.cipher.suites", _csv, (), "OpenSSL cipher names for TLS 1.2 (default: Python's secure set)"),
        Key("ssl.endpoint.identification.algorithm", _text, "https",
            "https: a broker checks the host name of the brokers it connects to against their certificates"),
        Key("ssl.principal.mapping.rules", _text, "DEFAULT",
            "rules mapping a client certificate's distinguished name to a principal name"),
        Key("authorizer.class.name", _authorizer, "",
            "ACL authorization: Kafka's AclAuthorizer or StandardAuthorizer class name (empty: none)"),
        Key("super.users", _text, "",
            "principals allowed everything, separated by semicolons (User:admin;User:broker)"),
        Key("allow.everyone.if.no.acl.found", _bool, False,
            "whether a resource no ACL names is open to everyone (Kafka's default: no)"),
        Key("max.connections.per.ip", _POS_INT, INT_MAX, "connections per client address; further ones are closed"),
        Key("max.connections.per.ip.overrides", _ip_overrides, "",
            "per-address exceptions, e.g. 127.0.0.1:200,hostName:100"),
        Key("fetch.max.bytes", _int_range(1024, INT_MAX), 57671680, "largest Fetch response's record bytes"),
        Key("log.segment.bytes", _int_range(14, INT_MAX), 1073741824, "segment roll size"),
        Key("log.roll.ms", _POS_LONG, None, "segment roll age"),
        Key("log.roll.hours", _int_range(1, INT_MAX), 168, "segment roll age in hours"),
        Key("log.retention.ms", _int_range(-1, LONG_MAX), None, "retention by time (-1: forever)"),
        Key("log.retention.minutes", _int_range(-1, INT_MAX), None, "retention by time in minutes"),
        Key("log.retention.hours", _int_range(-1, INT_MAX), 168, "retention by time in hours"),
        Key("log.retention.bytes", _int_range(-1, LONG_MAX), -1, "retention by size per partition"),
        Key("log.retention.check.interval.ms", _int_range(1, LONG_MAX), 300000, "retention check period"),
        Key("log.flush.interval.messages", _int_range(1, LONG_MAX), LONG_MAX, "fsync after this many messages"),
        Key("log.flush.interval.ms", _POS_LONG, None, "fsync data older than this"),
        Key("log.flush.scheduler.interval.ms", _POS_LONG, LONG_MAX, "how often the flusher looks"),
        Key("log.cleanup.policy", _cleanup_policy, "delete", "default cleanup.policy of topics"),
        Key("log.index.interval.bytes", _int_range(0, INT_MAX), 4096, "bytes between offset index entries"),
        Key("log.index.size.max.bytes", _int_range(4, INT_MAX), 10485760, "offset index size before roll"),
        Key("log.segment.open.files.max", _int_range(16, INT_MAX), 1024,
            "segment files kept open at once (least recently used closed first)"),
        Key("topic.creation.max.partitions", _int_range(1, 1_000_000), 10000,
            "partitions one CreateTopics/CreatePartitions request may create (more: POLICY_VIOLATION)"),
        Key("log.cleaner.enable", _bool, True, "run the log cleaner for compacted topics"),
        Key("log.cleaner.backoff.ms", _POS_LONG, 15000, "cleaner sleep when idle"),
        Key("log.cleaner.min.cleanable.ratio", lambda v: _ratio(v), 0.5, "dirty ratio that triggers cleaning"),
        Key("log.cleaner.delete.retention.ms", _POS_LONG, 86400000, "how long tombstones are kept"),
        Key("log.cleaner.min.compaction.lag.ms", _POS_LONG, 0, "records younger than this are not compacted"),
        Key("log.message.timestamp.type", _choice("CreateTime", "LogAppendTime"), "CreateTime",
            "timestamp kept in batches"),
        Key("file.delete.delay.ms", _POS_LONG, 60000,
            "accepted; segments are deleted at once (no read outlives one event-loop step)", applies=False),
        Key("offsets.topic.num.partitions", _int_range(1, 10_000), 50, "partitions of __consumer_offsets"),
        Key("offsets.topic.segment.bytes", _int_range(14, INT_MAX), 104857600, "__consumer_offsets segment size"),
        Key("offsets.topic.compression.codec", _int_range(0, 4), 0, "codec of coordinator writes"),
        Key("offsets.retention.minutes", _int_range(1, INT_MAX), 10080, "offset retention of empty groups"),
        Key("offsets.retention.check.interval.ms", _int_range(1, LONG_MAX), 600000, "expiry check period"),
        Key("offsets.load.buffer.size", _int_range(1, INT_MAX), 5242880,
            "accepted for compatibility; loading has no fixed buffer", applies=False),
        Key("offset.metadata.max.bytes", _int_range(0, 32767), 4096,
            "largest commit metadata string (at most 32767: an int16-length string in __consumer_offsets)"),
        Key("offsets.commit.required.acks", _commit_acks, -1,
            "-1: a coordinator write is answered once every ISR replica of its __consumer_offsets partition "
            "has it; 1: once the leader has it (in a cluster; a single node has one replica)"),
        Key("offsets.commit.timeout.ms", _int_range(1, INT_MAX), 5000,
            "a commit not replicated within this is answered COORDINATOR_NOT_AVAILABLE (the client retries)"),
        Key("share.coordinator.state.topic.num.partitions", _int_range(1, 10_000), 50,
            "partitions of __share_group_state (the share coordinator's state topic)"),
        Key("share.coordinator.state.topic.replication.factor", _int_range(1, 32767), 3,
            "replicas of __share_group_state (a cluster; one node: 1)"),
        Key("share.coordinator.state.topic.min.isr", _int_range(1, INT_MAX), 2,
            "min.insync.replicas of __share_group_state (at most its replicas)"),
        Key("share.coordinator.state.topic.segment.bytes", _int_range(14, INT_MAX), 104857600,
            "segment size of __share_group_state"),
        Key("transaction.state.log.num.partitions", _int_range(1, 10_000), 50, "partitions of __transaction_state"),
        Key("transaction.state.log.replication.factor", _int_range(1, 32767), 3,
            "replication factor of __transaction_state (a single node uses 1)"),
        Key("transaction.state.log.min.isr", _int_range(1, INT_MAX), 2,
            "min.insync.replicas of __transaction_state (at most its replication factor)"),
        Key("transaction.state.log.segment.bytes", _int_range(14, INT_MAX), 104857600,
            "__transaction_state segment size"),
        Key("transaction.state.log.load.buffer.size", _int_range(1, INT_MAX), 5242880,
            "accepted for compatibility; loading has no fixed buffer", applies=False),
        Key("transaction.max.timeout.ms", _int_range(1, INT_MAX), 900000,
            "largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above)"),
        Key("transactional.id.expiration.ms", _int_range(1, INT_MAX), 604800000,
            "a transactional id idle this long is forgotten"),
        Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int_range(1, INT_MAX), 10000,
            "how often transactions past their timeout are looked for and aborted"),
        Key("transaction.remove.expired.transaction.cleanup.interval.ms", _int_range(1, INT_MAX), 3600000,
            "how often expired transactional ids are removed"),
        Key("transaction.version", _int_range(0, 2), 2,
            "the finalized level of Kafka's transaction.version feature, advertised in ApiVersions: 2 (Kafka 4's "
            "default) lets clients use transactions V2 (KIP-890 part 2: EndTxn v5 bumps the epoch at every end, "
            "Produce v12 and TxnOffsetCommit v5 add partitions implicitly); 0 keeps them on V1 (what "
            "kafka-features.sh downgrades to in Kafka)"),
        Key("transaction.partition.verification.enable", _bool, True,
            "a partition leader asks the transaction coordinator whether a transactional batch's partition is "
            "in its transaction before appending the producer's first batch (KIP-890)"),
        Key("group.initial.rebalance.delay.ms", _POS_INT, 3000, "delay of the first rebalance of a group"),
        Key("group.min.session.timeout.ms", _POS_INT, 6000, "smallest session timeout"),
        Key("group.max.session.timeout.ms", _POS_INT, 1800000, "largest session timeout"),
        Key("group.max.size", _int_range(1, INT_MAX), INT_MAX, "members per group"),
        Key("group.coordinator.rebalance.protocols", _names_of(REBALANCE_PROTOCOLS, "protocols", "classic"),
            REBALANCE_PROTOCOLS, "group protocols served: classic (JoinGroup/SyncGroup), consumer (KIP-848, "
            "ConsumerGroupHeartbeat) and share (KIP-932 share groups: ShareGroupHeartbeat, ShareFetch, "
            "ShareAcknowledge); the APIs of a protocol are advertised in ApiVersions only when it is listed"),
        Key("group.consumer.session.timeout.ms", _int_range(1, INT_MAX), 45000,
            "consumer-protocol members: no heartbeat for this long and the member is removed"),
        Key("group.consumer.min.session.timeout.ms", _int_range(1, INT_MAX), 45000,
            "smallest group.consumer.session.timeout.ms a group config may set"),
        Key("group.consumer.max.session.timeout.ms", _int_range(1, INT_MAX), 60000,
            "largest group.consumer.session.timeout.ms a group config may set"),
        Key("group.consumer.heartbeat.interval.ms", _int_range(1, INT_MAX), 5000,
            "consumer-protocol members heartbeat this often (told in every response)"),
        Key("group.consumer.min.heartbeat.interval.ms", _int_range(1, INT_MAX), 5000,
            "smallest group.consumer.heartbeat.interval.ms a group config may set"),
        Key("group.consumer.max.heartbeat.interval.ms", _int_range(1, INT_MAX), 15000,
            "largest group.consumer.heartbeat.interval.ms a group config may set"),
        Key("group.consumer.max.size", _int_range(1, INT_MAX), INT_MAX, "members per consumer-protocol group"),
        Key("group.consumer.assignors", _names_of(CONSUMER_ASSIGNORS, "assignors"), CONSUMER_ASSIGNORS,
            "server-side assignors members may choose (group.remote.assignor); the first is the default"),
        Key("group.consumer.slow.phase.ms", _int_range(1, INT_MAX), 60000,
            "a consumer-protocol group outside Stable (Closing, Starting) longer than this is logged once, with "
            "the members that hold it up (gregor_group_member_holding_seconds shows them at any time)"),
        Key("group.share.session.timeout.ms", _int_range(1, INT_MAX), 45000,
            "share-group members: no heartbeat for this long and the member is removed"),
        Key("group.share.min.session.timeout.ms", _int_range(1, INT_MAX), 45000,
            "smallest share.session.timeout.ms a group config may set"),
        Key("group.share.max.session.timeout.ms", _int_range(1, INT_MAX), 60000,
            "largest share.session.timeout.ms a group config may set"),
        Key("group.share.heartbeat.interval.ms", _int_range(1, INT_MAX), 5000,
            "share-group members heartbeat this often (told in every response)"),
        Key("group.share.min.heartbeat.interval.ms", _int_range(1, INT_MAX), 5000,
            "smallest share.heartbeat.interval.ms a group config may set"),
        Key("group.share.max.heartbeat.interval.ms", _int_range(1, INT_MAX), 15000,
            "largest share.heartbeat.interval.ms a group config may set"),
        Key("group.share.max.size", _int_range(1, 1000), 200, "members per share group"),
        Key("group.share.record.lock.duration.ms", _int_range(1000, 3_600_000), 30000,
            "how long a share consumer holds the records it acquired before they are delivered again"),
        Key("group.share.min.record.lock.duration.ms", _int_range(1000, 3_600_000), 15000,
            "smallest share.record.lock.duration.ms a group config may set"),
        Key("group.share.max.record.lock.duration.ms", _int_range(1000, 3_600_000), 60000,
            "largest share.record.lock.duration.ms a group config may set"),
        Key("group.share.delivery.count.limit", _int_range(2, 10), 5,
            "deliveries of a record to share consumers before it is archived (rejected for good)"),
        Key("errors.deadletterqueue.topic.name.prefix", str, "dlq.",
            "the prefix a share group's dead-letter topic (errors.deadletterqueue.topic.name) must have; empty: "
            "any name (KIP-1191)"),
        Key("errors.deadletterqueue.auto.create.topics.enable", _bool, False,
            "create a share group's dead-letter topic on its first dead letter when it does not exist (KIP-1191)"),
        Key("group.share.max.share.sessions", _int_range(1, INT_MAX), 2000,
            "share sessions this broker keeps (one per share consumer and broker); one more is refused"),
        Key("group.share.partition.max.record.locks", _int_range(100, 10000), 2000,
            "records in flight (acquired or waiting to be delivered again) per share-partition"),
        Key("group.consumer.migration.policy", _one_of(MIGRATION_POLICIES), "bidirectional",
            "online migration between the classic and the consumer protocol (empty groups convert both ways "
            "whatever this says, as Kafka): upgrade lets a consumer-protocol member convert a classic group with "
            "members, downgrade lets the last one leaving convert a group of classic members back to a classic "
            "group, bidirectional both (Kafka 4's default), disabled neither"),
        Key("producer.id.expiration.ms", _int_range(1, INT_MAX), 86400000,
            "accepted; idle producer state is not expired yet (kept until restart without a snapshot)",
            applies=False),
        Key("telemetry.interval.ms", _int_range(0, INT_MAX), 10000,
            "how often consumption telemetry goes to __gregor_telemetry (0: never)"),
        Key("telemetry.topic.num.partitions", _int_range(1, 1000), 16,
            "partitions of __gregor_telemetry when the broker creates it (a group's records share one)"),
        Key("metrics.listener", _metrics_listener, "", "Prometheus endpoint, e.g. http://127.0.0.1:9404 (empty: off)"),
        # -- the cluster (ZooKeeper mode); without zookeeper.connect the broker is a single node
        Key("zookeeper.connect", _zk_connect, None,
            "ZooKeeper ensemble host:port[,host:port...][/chroot]; unset: a single node, no cluster"),
        Key("zookeeper.session.timeout.ms", _int_range(1000, INT_MAX), 6000,
            "ZooKeeper session timeout: how long a dead broker keeps its leaderships (docs/operations.md)"),
        Key("zookeeper.connection.timeout.ms", _int_range(1, INT_MAX), None,
            "how long to wait for the first ZooKeeper connection (default: the session timeout)"),
        Key("zookeeper.max.in.flight.requests", _int_range(1, INT_MAX), 10, "accepted", applies=False),
        Key("broker.rack", _nonempty, None, "this broker's rack (rack-aware replica placement, KIP-392)"),
        Key("default.replication.factor", _int_range(1, 32767), 1, "replication factor of auto-created topics"),
        Key("min.insync.replicas", _int_range(1, INT_MAX), 1,
            "ISR size below which acks=all produce is refused (NOT_ENOUGH_REPLICAS)"),
        Key("offsets.topic.replication.factor", _int_range(1, 32767), 3,
            "replication factor of __consumer_offsets (a single node uses 1)"),
        Key("unclean.leader.election.enable", _bool, False,
            "elect a leader outside the ISR when no ISR member is alive (may lose acknowledged records)"),
        Key("replica.lag.time.max.ms", _int_range(1, LONG_MAX), 30000,
            "a follower that has not caught up for this long leaves the ISR"),
        Key("replica.fetch.max.bytes", _int_range(0, INT_MAX), 1048576, "bytes per partition a follower asks for"),
        Key("replica.fetch.response.max.bytes", _int_range(0, INT_MAX), 10485760,
            "bytes per fetch response a follower asks for"),
        Key("replica.fetch.wait.max.ms", _int_range(0, INT_MAX), 500, "how long a follower fetch waits for data"),
        Key("replica.fetch.min.bytes", _int_range(1, INT_MAX), 1, "bytes a follower fetch waits for"),
        Key("replica.fetch.backoff.ms", _int_range(0, INT_MAX), 1000, "pause after a failed follower fetch"),
        Key("replica.socket.timeout.ms", _int_range(1, INT_MAX), 30000, "follower fetch request timeout"),
        Key("replica.high.watermark.checkpoint.interval.ms", _int_range(1, LONG_MAX), 5000,
            "how often high watermarks are written to replication-offset-checkpoint"),
        Key("replica.selector.class", _replica_selector, None,
            "RackAwareReplicaSelector: the leader sends a consumer whose client.rack it does not share to"
            " the most caught-up replica in that rack (KIP-392); LeaderSelector or unset: the leader"),
        Key("controlled.shutdown.enable", _bool, True, "move leadership away before a broker stops"),
        Key("controlled.shutdown.max.retries", _int_range(0, INT_MAX), 3, "controlled shutdown attempts"),
        Key("controlled.shutdown.retry.backoff.ms", _int_range(0, LONG_MAX), 5000,
            "pause between controlled shutdown attempts"),
        Key("auto.leader.rebalance.enable", _bool, True,
            "move leadership back to the preferred replica when it is in the ISR"),
        Key("leader.imbalance.check.interval.seconds", _int_range(1, LONG_MAX), 300,
            "how often the controller checks for leader imbalance"),
        Key("leader.imbalance.per.broker.percentage", _int_range(0, 100), 10,
            "share of a broker's partitions not led by it that triggers a preferred-leader election"),
    ]
}

# Kafka keys accepted so that a stock server.properties works; they have no effect here.
_IGNORED_PREFIXES = (
    "num.network.threads", "num.io.threads", "num.replica.", "num.recovery.threads.per.data.dir",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "zookeeper.ssl.", "zookeeper.set.acl",
    "zookeeper.clientCnxnSocket", "controller.", "process.roles", "inter.broker.protocol.version",
    "replica.socket.receive.buffer.bytes",
    "replica.fetch.min.bytes.", "replica.alter.log.dirs.", "log.preallocate",
    "queued.max.requests", "background.threads", "compression.type", "group.coordinator.",
    "group.consumer.", "share.", "sasl.kerberos.", "sasl.login.", "ssl.keymanager.", "ssl.trustmanager.",
    "ssl.secure.random.", "ssl.engine.factory.", "ssl.provider", "metric.reporters",
    "confluent.", "log.message.format.version", "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.", "num.partitions.", "offsets.topic.compression",
)


def _ratio(v: str) -> float:
    f = float(v)
    if not 0.0 <= f <= 1.0:
        raise ValueError("must be between 0 and 1")
    return f


LISTENER_PREFIX = "listener.name."
# listener.name.<listener>.<mechanism>.sasl.<key>: a SASL mechanism's settings on one listener
_MECHANISM_KEY = re.compile(r"([a-z0-9_-]+)\.(sasl\.jaas\.config|sasl\.server\.callback\.handler\.class)")


@dataclass
class BrokerConfig:
    values: dict[str, Any] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)
    listener_values: dict[str, Any] = field(default_factory=dict)  # listener.name.<listener>.<key>

    def setting(self, key: str) -> Any:
        """A key's value, ``listener.name.`` prefixed keys included (None when not set)."""
        if key.startswith(LISTENER_PREFIX):
            return self.listener_values.get(key)
        return self[key] if key in KEYS else None

    def __getitem__(self, key: str) -> Any:
        if key in self.values:
            return self.values[key]
        return KEYS[key].default

    @classmethod
    def from_sources(cls, properties: Path | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
        raw: dict[str, str] = {}
        if properties is not None:
            raw.update(read_properties(properties))
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--override {item!r}: expected key=value")
            k, v = item.split("=", 1)
            raw[k.strip()] = v
        return cls.from_mapping(raw)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, str]) -> BrokerConfig:
        cfg = cls()
        for key, value in raw.items():
            if key.startswith(LISTENER_PREFIX):
                cfg.listener_values[key] = _listener_value(key, str(value))
                continue
            spec = KEYS.get(key)
            if spec is None:
                if key.startswith(_IGNORED_PREFIXES):
                    cfg.ignored[key] = value
                    continue
                raise ConfigError(f"unknown configuration key {key!r}")
            try:
                cfg.values[key] = spec.parse(str(value))
            except ValueError as e:
                raise ConfigError(f"invalid value {value!r} for {key}: {e}") from None
        if cfg.values.get("broker.id") is not None and "node.id" not in cfg.values:
            if cfg.values["broker.id"] < 0:
                raise ConfigError("broker.id=-1 (generated ids) is not supported; set node.id")
            cfg.values["node.id"] = cfg.values["broker.id"]
        elif "broker.id" in cfg.values and cfg.values["broker.id"] != cfg.values["node.id"]:
            raise ConfigError(f"broker.id={cfg.values['broker.id']} contradicts node.id={cfg.values['node.id']}")
        if 0 < cfg["queued.max.request.bytes"] < cfg["socket.request.max.bytes"]:
            raise ConfigError("queued.max.request.bytes must be -1 or at least socket.request.max.bytes")
        if cfg["max.connections.per.ip"] == 0 and not cfg["max.connections.per.ip.overrides"]:
            raise ConfigError("max.connections.per.ip can be 0 only if max.connections.per.ip.overrides is set")
        for what in ("session.timeout.ms", "heartbeat.interval.ms"):
            low, value, high = (cfg[f"group.consumer.{m}{what}"] for m in ("min.", "", "max."))
            if not low <= value <= high:
                raise ConfigError(f"group.consumer.{what}={value} must be between group.consumer.min.{what}={low} "
                                  f"and group.consumer.max.{what}={high}")
        if cfg["group.consumer.heartbeat.interval.ms"] >= cfg["group.consumer.session.timeout.ms"]:
            raise ConfigError("group.consumer.heartbeat.interval.ms must be smaller than "
                              "group.consumer.session.timeout.ms")
        cfg.listeners()  # checked now: a bad listener setting stops the broker before it starts
        return cfg

    def listeners(self) -> Listeners:
        """The listeners, advertised listeners and inter-broker listener (security/listeners.py)."""
        try:
            return parse_listeners(self["listeners"], self["advertised.listeners"],
                                   self["listener.security.protocol.map"], self["inter.broker.listener.name"],
                                   self["security.inter.broker.protocol"])
        except ListenerConfigError as e:
            raise ConfigError(str(e)) from None

    # Derived settings, resolved the way Kafka resolves them (ms wins over minutes over hours).
    @property
    def data_dir(self) -> Path:
        d = self["log.dirs"] or self["log.dir"]
        if "," in d:
            raise ConfigError("log.dirs: Gregor keeps one data directory per broker; give one path")
        return Path(d)

    @property
    def retention_ms(self) -> int:
        if self["log.retention.ms"] is not None:
            return int(self["log.retention.ms"])
        if self["log.retention.minutes"] is not None:
            return int(self["log.retention.minutes"]) * 60_000
        return int(self["log.retention.hours"]) * 3_600_000

    @property
    def roll_ms(self) -> int:
        if self["log.roll.ms"] is not None:
            return int(self["log.roll.ms"])
        return int(self["log.roll.hours"]) * 3_600_000

    @property
    def flush_ms(self) -> int:
        v = self["log.flush.interval.ms"]
        return LONG_MAX if v is None else int(v)


    def topic_defaults(self) -> dict[str, Any]:
        """Defaults of the topic-level configs: the values of the broker keys they are synonyms of
        (``TOPIC_SYNONYMS``), with the retention, roll and flush times in effect (which the
        hours and minutes forms of those keys may set)."""
        effective = {"log.retention.ms": self.retention_ms, "log.roll.ms": self.roll_ms,
                     "log.flush.interval.ms": self.flush_ms}
        out = {key: effective[broker_key] if broker_key in effective else self[broker_key]
               for key, broker_key in TOPIC_SYNONYMS.items()}
        out.update(TOPIC_FIXED_DEFAULTS)
        return out


def _listener_value(key: str, value: str) -> Any:
    """``listener.name.<listener>.<key>``: a broker key's value for one listener, or a SASL
    mechanism's setting on it (``<mechanism>.sasl.jaas.config``)."""
    listener, _, sub = key[len(LISTENER_PREFIX):].partition(".")
    if not listener or not sub:
        raise ConfigError(f"{key}: expected listener.name.<listener>.<key>")
    if _MECHANISM_KEY.fullmatch(sub):
        return value.strip()
    spec = KEYS.get(sub)
    if spec is None or not sub.startswith(("ssl.", "sasl.", "connections.max.reauth.ms",
                                           "connection.failed.authentication.delay.ms")):
        raise ConfigError(f"unknown configuration key {key!r} ({sub!r} cannot be set per listener)")
    try:
        return spec.parse(value)
    except ValueError as e:
        raise ConfigError(f"invalid value {value!r} for {key}: {e}") from None


# Topic-level configs (CreateTopics configs, DescribeConfigs) with their parsers.
TOPIC_KEYS: dict[str, Callable[[str], Any]] = {
    "cleanup.policy": _cleanup_policy,
    "retention.ms": _int_range(-1, LONG_MAX),
    "retention.bytes": _int_range(-1, LONG_MAX),
    "segment.bytes": _int_range(14, INT_MAX),
    "segment.ms": _int_range(1, LONG_MAX),
    "segment.index.bytes": _int_range(4, INT_MAX),
    "index.interval.bytes": _int_range(0, INT_MAX),
    "max.message.bytes": _int_range(0, INT_MAX),
    "flush.messages": _int_range(1, LONG_MAX),
    "flush.ms": _int_range(0, LONG_MAX),
    "delete.retention.ms": _int_range(0, LONG_MAX),
    "min.compaction.lag.ms": _int_range(0, LONG_MAX),
    "min.cleanable.dirty.ratio": _ratio,
    "message.timestamp.type": _choice("CreateTime", "LogAppendTime"),
    "file.delete.delay.ms": _int_range(0, LONG_MAX),
    "min.insync.replicas": _int_range(1, INT_MAX),
    "unclean.leader.election.enable": _bool,
    # KIP-1191: the topic may be a share group's dead-letter topic
    "errors.deadletterqueue.group.enable": _bool,
}
# Topic configs that no broker key sets: their defaults.
TOPIC_FIXED_DEFAULTS: dict[str, Any] = {"errors.deadletterqueue.group.enable": False}
# Topic config -> the broker key it defaults from (Kafka's synonyms): the topic defaults and
# DescribeConfigs' config sources and synonyms read this one table.
TOPIC_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy", "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes", "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms", "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes", "max.message.bytes": "message.max.bytes",
    "flush.messages": "log.flush.interval.messages", "flush.ms": "log.flush.interval.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "message.timestamp.type": "log.message.timestamp.type", "file.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
# Accepted on topics for compatibility (replication, producer-side settings); stored, no effect.
TOPIC_PASSTHROUGH = ("compression.type",
                     "preallocate", "message.downconversion.enable", "local.retention.ms",
                     "local.retention.bytes", "remote.storage.enable", "follower.replication.throttled.replicas",
                     "leader.replication.throttled.replicas", "max.compaction.lag.ms",
                     "message.timestamp.difference.max.ms", "message.timestamp.before.max.ms",
                     "message.timestamp.after.max.ms")


def parse_topic_config(key: str, value: str) -> Any:
    if key in TOPIC_KEYS:
        try:
            return TOPIC_KEYS[key](value)
        except ValueError as e:
            raise ConfigError(f"invalid value {value!r} for {key}: {e}") from None
    if key in TOPIC_PASSTHROUGH:
        return value
    raise ConfigError(f"unknown topic configuration {key!r}")


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties subset: key=value or key: value, # and ! comments, backslash continuation."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    out: dict[str, str] = {}
    pending = ""
    for lineno, line in enumerate(text.splitlines(), 1):
        line = pending + line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            raise ConfigError(f"{path}:{lineno}: cannot parse {line!r}")
        out[m.group(1)] = m.group(2)
    return out
