"""A blocking Kafka admin client: bootstrap, ApiVersions negotiation, routing to the group
coordinator. Requests go over ``wire_client`` (encoded with Gregor's schema-driven encoder,
responses decoded with kio), so every API and version Kafka defines is available."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gregor.admin.wire_client import WireClient
from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.client import ClientSecurity

# highest version of each API this client speaks (the broker may offer fewer)
PREFERRED = {
    ApiKey.METADATA: 12, ApiKey.FIND_COORDINATOR: 3, ApiKey.DESCRIBE_GROUPS: 5, ApiKey.LIST_GROUPS: 5,
    ApiKey.OFFSET_FETCH: 7, ApiKey.OFFSET_COMMIT: 8, ApiKey.LIST_OFFSETS: 7, ApiKey.DELETE_GROUPS: 2,
    ApiKey.OFFSET_DELETE: 0, ApiKey.CREATE_TOPICS: 7, ApiKey.DELETE_TOPICS: 5, ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.DESCRIBE_PRODUCERS: 0, ApiKey.DESCRIBE_TRANSACTIONS: 0, ApiKey.LIST_TRANSACTIONS: 2,
    ApiKey.WRITE_TXN_MARKERS: 1,
}


class AdminError(Exception):
    """A failure to show the operator: names the API and Kafka's error."""


@dataclass
class Node:
    node_id: int
    host: str
    port: int


class Connection:
    """A connection to one broker with the API versions it offered."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str,
                 security: ClientSecurity | None = None) -> None:
        try:
            self.wire = WireClient(f"{host}:{port}", timeout, client_id, security)
        except PermissionError as e:
            raise AdminError(f"{host}:{port}: {e}") from None
        except OSError as e:
            raise AdminError(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
        self.versions: dict[int, tuple[int, int]] = {}
        resp = self._call(ApiKey.API_VERSIONS, 0, {})
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, api_key: int) -> int:
        lo, hi = self.versions.get(api_key, (-1, -1))
        v = min(hi, PREFERRED.get(api_key, hi))  # type: ignore[call-overload]
        if v < lo or v < 0:
            raise AdminError(f"the broker does not serve {ApiKey(api_key).name}")
        return v

    def call(self, api_key: int, body: dict[str, Any]) -> Any:
        return self._call(api_key, self.version_for(api_key), body)

    def call_undecoded(self, api_key: int, body: dict[str, Any]) -> tuple[int, bytes]:
        """(version, response body bytes after the header): for the answers kio cannot decode
        (DescribeTransactions' start time -1 of a transaction not ongoing)."""
        version = self.version_for(api_key)
        try:
            self.wire.send_raw(self.wire.request_bytes(api_key, version, body))
            frame = self.wire.recv_frame()
        except OSError as e:
            raise AdminError(f"{ApiKey(api_key).name}: connection failed: {e}") from None
        if int.from_bytes(frame[:4], "big", signed=True) != self.wire.corr:
            raise AdminError(f"{ApiKey(api_key).name}: an answer to another request")
        flexible = api_key != ApiKey.API_VERSIONS and codec.response_schema(api_key, version).__flexible__
        return version, frame[5 if flexible else 4:]

    def _call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        try:
            return self.wire.call(api_key, version, body)
        except OSError as e:
            raise AdminError(f"{ApiKey(api_key).name}: connection failed: {e}") from None

    def close(self) -> None:
        self.wire.close()


class AdminClient:
    """``bootstrap``: host:port[,host:port...]; requests without a node go to the first of them
    that answers (a cluster can be asked through any live broker)."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str = "gregor-cli",
                 security: ClientSecurity | None = None) -> None:
        self.timeout = timeout
        self.client_id = client_id
        self.security = security
        self._conns: dict[tuple[str, int], Connection] = {}
        self.bootstraps: list[tuple[str, int]] = []
        for entry in bootstrap.split(","):
            host, _, port = entry.strip().rpartition(":")
            if not host or not port.isdigit():
                raise AdminError(f"--bootstrap-server {bootstrap!r}: expected host:port[,host:port...]")
            self.bootstraps.append((host, int(port)))
        self.bootstrap = self.bootstraps[0]

    def conn(self, node: Node | None = None) -> Connection:
        if node is not None:
            return self._connect((node.host, node.port))
        failures = []
        for key in [self.bootstrap] + [b for b in self.bootstraps if b != self.bootstrap]:
            try:
                c = self._connect(key)
            except AdminError as e:
                failures.append(str(e))
                continue
            self.bootstrap = key
            return c
        raise AdminError("; ".join(failures))

    def bootstrap_call(self, api_key: int, body: dict[str, Any]) -> Any:
        """A request any broker can answer: to the current bootstrap broker, or, if it fails, to
        the next one that answers."""
        failures = []
        for _ in range(len(self.bootstraps)):
            key = self.bootstrap
            try:
                return self.conn().call(api_key, body)
            except AdminError as e:
                failures.append(str(e))
                dead = self._conns.pop(key, None)
                if dead is not None:
                    dead.close()
                i = self.bootstraps.index(key) if key in self.bootstraps else -1
                self.bootstrap = self.bootstraps[(i + 1) % len(self.bootstraps)]
        raise AdminError("; ".join(dict.fromkeys(failures)))

    def _connect(self, key: tuple[str, int]) -> Connection:
        c = self._conns.get(key)
        if c is None:
            c = self._conns[key] = Connection(key[0], key[1], self.timeout, self.client_id, self.security)
        return c

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # -- metadata ----------------------------------------------------------------------------
    def metadata(self, topics: list[str] | None = None) -> Any:
        body: dict[str, Any] = {"topics": None if topics is None else [{"name": t} for t in topics],
                                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        return self.bootstrap_call(ApiKey.METADATA, body)

    def nodes(self) -> dict[int, Node]:
        return {b.node_id: Node(b.node_id, b.host, b.port) for b in self.metadata([]).brokers}

    def find_coordinator(self, group: str, key_type: int = 0) -> tuple[Node | None, ErrorCode, str | None]:
        """(coordinator, error, message): the message says why there is none, or (Gregor) how far
        the coordinator's load of the group's partition has got. ``key_type`` 1: the transaction
        coordinator of the transactional id ``group``."""
        r = self.bootstrap_call(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": key_type,
                                                          "coordinator_keys": [group]})
        if hasattr(r, "coordinators"):
            r = r.coordinators[0]
        code = ErrorCode(r.error_code)
        message = getattr(r, "error_message", None)
        if code:
            return None, code, message
        return Node(r.node_id, r.host, r.port), code, message

    def coordinator_conn(self, group: str) -> Connection:
        node, code, message = self.find_coordinator(group)
        if node is None:
            raise AdminError(f"no coordinator for group {group!r}: {code.name.upper()}"
                             + (f" ({message})" if message else ""))
        return self.conn(node)

    # -- offsets -----------------------------------------------------------------------------
    def list_offsets(self, partitions: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """Offsets at ``timestamp`` (-1 latest, -2 earliest) from each partition's leader; -1 where
        it is not known: no leader, a leader that cannot be reached (in a cluster, a broker that
        just died is still named leader until the controller moves its partitions), or an error."""
        out: dict[tuple[str, int], int] = {}
        by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
        md = self.metadata(sorted({t for t, _ in partitions}))
        nodes = {b.node_id: Node(b.node_id, b.host, b.port) for b in md.brokers}
        leaders = {(t.name, p.partition_index): nodes.get(p.leader_id) for t in md.topics for p in t.partitions}
        for tp in partitions:
            node = leaders.get(tp)
            if node is None:
                out[tp] = -1
                continue
            by_leader.setdefault((node.host, node.port), []).append(tp)
        for (host, port), tps in by_leader.items():
            topics: dict[str, list[dict[str, Any]]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append({"partition_index": p, "current_leader_epoch": -1,
                                                 "timestamp": timestamp})
            try:
                r = self.conn(Node(-1, host, port)).call(ApiKey.LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            except AdminError:  # the leader is unreachable: its partitions' offsets are unknown
                self._drop((host, port))
                out.update(dict.fromkeys(tps, -1))
                continue
            for t in r.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = p.offset if not p.error_code else -1
        return out

    def _drop(self, key: tuple[str, int]) -> None:
        c = self._conns.pop(key, None)
        if c is not None:
            c.close()
