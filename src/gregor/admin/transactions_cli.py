"""``gregor transactions``: list, describe, describe-producers, abort, find-hanging. Shaped like
Kafka's kafka-transactions.sh (TransactionsCommand): the same subcommands, options and table
columns; ``--json`` for scripts. Exit codes: 0, 1 when a request fails (a message on stderr), 2
for arguments that do not go together (and argparse's own refusals).

- ``list``: ListTransactions to every broker (each lists the transactional ids it coordinates);
  Kafka's ``--duration-filter`` and ``--transactional-id-pattern``, and the request's other
  filters, ``--state`` and ``--producer-id`` (repeatable). A broker that does not answer is named
  on stderr and the exit code is 1: the list is incomplete.
- ``describe --transactional-id ID``: FindCoordinator (key type 1), then DescribeTransactions.
- ``describe-producers --topic T --partition P [--broker-id N]``: DescribeProducers to the
  partition's leader (or to broker N, which may be a follower).
- ``abort --topic T --partition P --start-offset O``: the producer whose transaction starts at O
  (DescribeProducers), then an ABORT marker for it written by the partition's leader
  (WriteTxnMarkers, as Kafka's Admin.abortTransaction); or ``--producer-id --producer-epoch
  --coordinator-epoch`` given directly.
- ``find-hanging --broker-id N | --topic T [--partition P] [--max-transaction-timeout MIN]``:
  Kafka's FindHangingTransactionsCommand. The producers with a transaction open longer than the
  timeout (by their last timestamp) on the partitions searched are candidates; one is hanging when
  no coordinator lists its producer id, its transactional id is not found, or its transaction
  does not name the partition.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gregor.admin.client import AdminClient, AdminError, Connection, Node
from gregor.admin.output import add_action, add_common_options, admin_client, emit, format_table
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.transaction_log import TxnState
from gregor.protocol.varint import read_uvarint

STATES = [s.kafka_name for s in TxnState]
BATCH = 500  # partitions per DescribeProducers request, as Kafka's tool
RETRY_S = 10.0  # how long retriable errors (a coordinator loading, a leader moving) are retried
_BACKOFF_S = 0.2
_RETRIABLE = {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
              ErrorCode.not_coordinator, ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
              ErrorCode.unknown_leader_epoch, ErrorCode.request_timed_out}

T = TypeVar("T")


class UsageError(AdminError):
    """Arguments that do not go together: exit code 2."""


class Retriable(AdminError):
    """A retriable error: tried again until RETRY_S has passed, then shown."""


class _Refused(AdminError):
    """A broker answered, with an error that asking the others will not change."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("transactions", help="transactions and producers (like kafka-transactions.sh)",
                       description="Analyze the transactional state of producers in the cluster; detect and "
                                   "recover from hanging transactions.")
    add_common_options(p)
    ts = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = add_action(ts, "list", "list transactions")
    ls.add_argument("--duration-filter", type=int, metavar="MS",
                    help="only transactions running longer than this many milliseconds (< 0: all)")
    ls.add_argument("--transactional-id-pattern", metavar="REGEX",
                    help="only transactional ids matching this regular expression")
    ls.add_argument("--state", action="append", default=[], choices=STATES, metavar="STATE",
                    help=f"only transactions in this state, may be repeated ({', '.join(STATES)})")
    ls.add_argument("--producer-id", action="append", default=[], type=int, metavar="ID",
                    help="only this producer id, may be repeated")
    d = add_action(ts, "describe", "describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True, help="transactional id")
    dp = add_action(ts, "describe-producers", "describe the states of active producers for a topic partition")
    dp.add_argument("--broker-id", type=int, help="ask this broker (a replica) instead of the leader")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", type=int, required=True, help="partition number")
    a = add_action(ts, "abort", "abort a hanging transaction")
    a.add_argument("--topic", required=True, help="topic name")
    a.add_argument("--partition", type=int, required=True, help="partition number")
    a.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    a.add_argument("--producer-id", type=int, help="producer id (with --producer-epoch and --coordinator-epoch)")
    a.add_argument("--producer-epoch", type=int, help="producer epoch")
    a.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")
    f = add_action(ts, "find-hanging", "find hanging transactions")
    f.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    f.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="maximum transaction timeout in minutes to limit the scope of the search (default 15)")
    f.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    f.add_argument("--partition", type=int, help="partition number")


def run(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    try:
        return {"list": list_transactions, "describe": describe, "describe-producers": describe_producers,
                "abort": abort, "find-hanging": find_hanging}[args.action](admin, args)
    except UsageError as e:
        print(f"gregor transactions: {e}", file=sys.stderr)
        return 2
    finally:
        admin.close()


def _table(args: argparse.Namespace, rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> None:
    """Kafka's headers (the header alone when there are no rows); JSON with the keys."""
    if args.json:
        emit(args, rows, [])
        return
    cells = [[_cell(r[key]) for _, key in columns] for r in rows]
    print("\n".join(format_table([h for h, _ in columns], cells)))


def _cell(v: Any) -> str:
    if v is None:
        return "None"
    if isinstance(v, list):
        return ",".join(f"{tp['topic']}-{tp['partition']}" if isinstance(tp, dict) else str(tp) for tp in v)
    return str(v)


def _code_name(code: int) -> str:
    return ErrorCode(code).name.upper()


def _retrying(fn: Callable[[], T], deadline: float | None = None) -> T:
    deadline = time.monotonic() + RETRY_S if deadline is None else deadline
    while True:
        try:
            return fn()
        except Retriable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(_BACKOFF_S)


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- list -------------------------------------------------------------------------------------

def list_transactions(admin: AdminClient, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"state_filters": args.state, "producer_id_filters": args.producer_id,
                            "duration_filter": -1 if args.duration_filter is None else args.duration_filter,
                            "transactional_id_pattern": args.transactional_id_pattern or None}
    listings, silent = _list_all(admin, body, need_duration=args.duration_filter is not None,
                                 need_pattern=bool(args.transactional_id_pattern))
    rows = [{"transactional_id": tid, "coordinator": node, "producer_id": pid, "transaction_state": state}
            for node, tid, pid, state in listings]
    rows.sort(key=lambda r: (r["transactional_id"], r["coordinator"]))
    _table(args, rows, [("TransactionalId", "transactional_id"), ("Coordinator", "coordinator"),
                        ("ProducerId", "producer_id"), ("TransactionState", "transaction_state")])
    for why in silent:
        print(f"gregor transactions: the transactions of {why} are not listed", file=sys.stderr)
    return 1 if silent else 0


def _list_all(admin: AdminClient, body: dict[str, Any], need_duration: bool = False,
              need_pattern: bool = False) -> tuple[list[tuple[int, str, int, str]], list[str]]:
    """(coordinator, transactional id, producer id, state) from every broker, and the brokers
    that did not answer."""
    out: list[tuple[int, str, int, str]] = []
    silent: list[str] = []
    for node in sorted(admin.nodes().values(), key=lambda n: n.node_id):
        def ask(node: Node = node) -> Any:
            conn = admin.conn(node)
            version = conn.version_for(ApiKey.LIST_TRANSACTIONS)
            for option, needs, missing in (("--duration-filter", 1, need_duration),
                                           ("--transactional-id-pattern", 2, need_pattern)):
                if missing and version < needs:
                    raise _Refused(f"broker {node.node_id} does not support {option} (ListTransactions v{version})")
            r = conn.call(ApiKey.LIST_TRANSACTIONS, body)
            if r.error_code in _RETRIABLE:
                raise Retriable(f"ListTransactions: {_code_name(r.error_code)}")
            if r.error_code:
                raise _Refused(f"Failed to list transactions: {_code_name(r.error_code)}")
            return r

        try:
            r = _retrying(ask)
        except _Refused:
            raise
        except AdminError as e:
            silent.append(f"broker {node.node_id} ({node.host}:{node.port}): {e}")
            admin._drop((node.host, node.port))
            continue
        out.extend((node.node_id, t.transactional_id, t.producer_id, t.transaction_state)
                   for t in r.transaction_states)
    return out, silent


# -- describe ---------------------------------------------------------------------------------

@dataclass
class TxnDescription:
    coordinator_id: int
    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]]


def describe(admin: AdminClient, args: argparse.Namespace) -> int:
    tid = args.transactional_id
    d = describe_transaction(admin, tid)
    if d.error_code == ErrorCode.transactional_id_not_found:
        raise AdminError(f"Failed to describe transaction state of transactional-id `{tid}`: "
                         f"TRANSACTIONAL_ID_NOT_FOUND (no transactional id {tid!r} is known to its coordinator)")
    if d.error_code:
        raise AdminError(f"Failed to describe transaction state of transactional-id `{tid}`: "
                         f"{_code_name(d.error_code)}")
    started = d.start_time_ms >= 0
    row = {"coordinator_id": d.coordinator_id, "transactional_id": tid, "producer_id": d.producer_id,
           "producer_epoch": d.producer_epoch, "transaction_state": d.state, "transaction_timeout_ms": d.timeout_ms,
           "current_transaction_start_time_ms": d.start_time_ms if started else None,
           "transaction_duration_ms": _now_ms() - d.start_time_ms if started else None,
           "topic_partitions": [{"topic": t, "partition": p} for t, p in d.partitions]}
    if args.json:
        emit(args, row, [])
        return 0
    _table(args, [row], [("CoordinatorId", "coordinator_id"), ("TransactionalId", "transactional_id"),
                         ("ProducerId", "producer_id"), ("ProducerEpoch", "producer_epoch"),
                         ("TransactionState", "transaction_state"), ("TransactionTimeoutMs", "transaction_timeout_ms"),
                         ("CurrentTransactionStartTimeMs", "current_transaction_start_time_ms"),
                         ("TransactionDurationMs", "transaction_duration_ms"), ("TopicPartitions", "topic_partitions")])
    return 0


def describe_transaction(admin: AdminClient, tid: str) -> TxnDescription:
    """The coordinator's answer for ``tid`` (its error code in the result: NONE or
    TRANSACTIONAL_ID_NOT_FOUND; retriable errors are retried, others raised)."""
    def ask() -> TxnDescription:
        node, code, message = admin.find_coordinator(tid, key_type=1)
        if node is None:
            err = Retriable if code in _RETRIABLE else AdminError
            raise err(f"no transaction coordinator for transactional-id `{tid}`: {_code_name(code)}"
                      + (f" ({message})" if message else ""))
        try:
            conn = admin.conn(node)
            _, body = conn.call_undecoded(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})
        except AdminError as e:
            admin._drop((node.host, node.port))
            raise Retriable(f"transaction coordinator {node.node_id} ({node.host}:{node.port}): {e}") from None
        (d,) = decode_describe_transactions(body, node.node_id)
        if d.error_code in _RETRIABLE:
            raise Retriable(f"DescribeTransactions `{tid}`: {_code_name(d.error_code)}")
        return d

    return _retrying(ask)


def decode_describe_transactions(body: bytes, coordinator_id: int = -1) -> list[TxnDescription]:
    """A DescribeTransactions v0 response body (flexible), read here because kio refuses the
    start time -1 a transaction that is not ongoing has."""
    r = _Reader(body)
    r.int32()  # throttle time
    out = []
    for _ in range(r.array()):
        code, tid, state = r.int16(), r.string() or "", r.string() or ""
        timeout_ms, start, pid, epoch = r.int32(), r.int64(), r.int64(), r.int16()
        partitions: list[tuple[str, int]] = []
        for _ in range(r.array()):
            topic = r.string() or ""
            partitions.extend((topic, r.int32()) for _ in range(r.array()))
            r.tags()
        r.tags()
        out.append(TxnDescription(coordinator_id, code, tid, state, timeout_ms, start, pid, epoch, partitions))
    return out


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def _fixed(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(v)

    def int16(self) -> int:
        return self._fixed(">h")

    def int32(self) -> int:
        return self._fixed(">i")

    def int64(self) -> int:
        return self._fixed(">q")

    def uvarint(self) -> int:
        v, self.pos = read_uvarint(self.buf, self.pos, len(self.buf), AdminError)
        return v

    def array(self) -> int:
        return max(self.uvarint() - 1, 0)

    def string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


# -- describe-producers -----------------------------------------------------------------------

@dataclass
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int  # -1: none
    current_txn_start_offset: int  # -1: none


PRODUCER_COLUMNS = [("ProducerId", "producer_id"), ("ProducerEpoch", "producer_epoch"),
                    ("LatestCoordinatorEpoch", "latest_coordinator_epoch"), ("LastSequence", "last_sequence"),
                    ("LastTimestamp", "last_timestamp"),
                    ("CurrentTransactionStartOffset", "current_transaction_start_offset")]


def describe_producers(admin: AdminClient, args: argparse.Namespace) -> int:
    tp = (args.topic, args.partition)
    where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
    try:
        states = producer_states(admin, [tp], args.broker_id)[tp]
    except AdminError as e:
        raise AdminError(f"Failed to describe producers for partition {tp[0]}-{tp[1]} on {where}: {e}") from None
    rows = [{"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
             "latest_coordinator_epoch": s.coordinator_epoch, "last_sequence": s.last_sequence,
             "last_timestamp": s.last_timestamp,
             "current_transaction_start_offset": s.current_txn_start_offset if s.current_txn_start_offset >= 0
             else None} for s in states]
    _table(args, rows, PRODUCER_COLUMNS)
    return 0


def _partition_nodes(admin: AdminClient,
                     topics: list[str] | None) -> tuple[dict[int, Node], dict[tuple[str, int], Any]]:
    """(brokers, partition -> its metadata entry) for ``topics`` (None: every topic); an unknown
    topic raises."""
    md = admin.metadata(topics)
    nodes = {b.node_id: Node(b.node_id, b.host, b.port) for b in md.brokers}
    parts = {}
    for t in md.topics:
        if t.error_code in (ErrorCode.leader_not_available,):
            raise Retriable(f"topic {t.name!r}: LEADER_NOT_AVAILABLE")
        if t.error_code:
            raise AdminError(f"topic {t.name!r}: {_code_name(t.error_code)}")
        for p in t.partitions:
            parts[(t.name, p.partition_index)] = p
    return nodes, parts


def producer_states(admin: AdminClient, partitions: list[tuple[str, int]],
                    broker_id: int | None = None) -> dict[tuple[str, int], list[ProducerState]]:
    """DescribeProducers for ``partitions``, each asked of its leader (or of ``broker_id``); a
    partition's error raises (retriable ones are retried with fresh metadata)."""
    out: dict[tuple[str, int], list[ProducerState]] = {}
    deadline = time.monotonic() + RETRY_S

    def ask() -> None:
        pending = [tp for tp in partitions if tp not in out]
        nodes, parts = _partition_nodes(admin, sorted({t for t, _ in pending}))
        by_node: dict[int, list[tuple[str, int]]] = {}
        for tp in pending:
            p = parts.get(tp)
            if p is None:
                raise AdminError(f"{tp[0]}-{tp[1]}: UNKNOWN_TOPIC_OR_PARTITION (the topic has no partition {tp[1]})")
            target = broker_id if broker_id is not None else p.leader_id
            if broker_id is None and target < 0:
                raise Retriable(f"{tp[0]}-{tp[1]}: LEADER_NOT_AVAILABLE")
            by_node.setdefault(target, []).append(tp)
        retry: str | None = None
        for node_id, tps in sorted(by_node.items()):
            node = nodes.get(node_id)
            if node is None:
                raise AdminError(f"broker {node_id} is not in the cluster's metadata")
            for i in range(0, len(tps), BATCH):
                topics: dict[str, list[int]] = {}
                for t, p in tps[i:i + BATCH]:
                    topics.setdefault(t, []).append(p)
                try:
                    r = admin.conn(node).call(ApiKey.DESCRIBE_PRODUCERS, {
                        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
                except AdminError as e:
                    admin._drop((node.host, node.port))
                    raise Retriable(f"broker {node_id} ({node.host}:{node.port}): {e}") from None
                for t in r.topics:
                    for p in t.partitions:
                        if p.error_code:
                            why = (f"{t.name}-{p.partition_index}: {_code_name(p.error_code)}"
                                   + (f" ({p.error_message})" if p.error_message else ""))
                            if p.error_code in _RETRIABLE and broker_id is None:
                                retry = why
                                continue
                            raise AdminError(why)
                        out[(t.name, p.partition_index)] = [
                            ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                                          s.coordinator_epoch, s.current_txn_start_offset)
                            for s in p.active_producers]
        if retry is not None:
            raise Retriable(retry)

    _retrying(ask, deadline)
    return out


# -- abort ------------------------------------------------------------------------------------

def abort(admin: AdminClient, args: argparse.Namespace) -> int:
    tp = (args.topic, args.partition)
    name = f"{tp[0]}-{tp[1]}"
    if args.start_offset is None and args.producer_id is None:
        raise UsageError("The transaction to abort must be identified either with --start-offset or with "
                         "--producer-id, --producer-epoch, and --coordinator-epoch")
    if args.start_offset is not None and args.producer_id is not None:
        raise UsageError("give either --start-offset or --producer-id, --producer-epoch and --coordinator-epoch")
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise UsageError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise UsageError("Missing required argument --coordinator-epoch")
        # a transaction started by a new producer id that never saw a marker shows coordinator
        # epoch -1: 0 is at most any coordinator epoch (Kafka's tool does the same)
        spec = (args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0))
    else:
        try:
            states = producer_states(admin, [tp])[tp]
        except AdminError as e:
            raise AdminError(f"Failed to validate producer state for partition {name}: {e}") from None
        found = [s for s in states if s.current_txn_start_offset == args.start_offset]
        if not found:
            raise AdminError(f"Could not find any open transactions starting at offset {args.start_offset} "
                             f"on partition {name}")
        s = found[0]
        spec = (s.producer_id, s.producer_epoch, max(s.coordinator_epoch, 0))
    producer_id, producer_epoch, coordinator_epoch = spec
    what = (f"AbortTransactionSpec(topicPartition={name}, producerId={producer_id}, "
            f"producerEpoch={producer_epoch}, coordinatorEpoch={coordinator_epoch})")
    try:
        _retrying(lambda: _write_abort_marker(admin, tp, producer_id, producer_epoch, coordinator_epoch))
    except AdminError as e:
        raise AdminError(f"Failed to abort transaction {what}: {e}") from None
    row = {"topic": tp[0], "partition": tp[1], "producer_id": producer_id, "producer_epoch": producer_epoch,
           "coordinator_epoch": coordinator_epoch, "result": "aborted"}
    if args.json:
        emit(args, row, [])
    else:
        print(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}, coordinator epoch "
              f"{coordinator_epoch}) on partition {name}")
    return 0


def _write_abort_marker(admin: AdminClient, tp: tuple[str, int], producer_id: int, producer_epoch: int,
                        coordinator_epoch: int) -> None:
    nodes, parts = _partition_nodes(admin, [tp[0]])
    p = parts.get(tp)
    if p is None:
        raise AdminError(f"{tp[0]}-{tp[1]}: UNKNOWN_TOPIC_OR_PARTITION")
    node = nodes.get(p.leader_id)
    if node is None:
        raise Retriable(f"{tp[0]}-{tp[1]}: LEADER_NOT_AVAILABLE")
    try:
        conn: Connection = admin.conn(node)
        r = conn.call(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
            "topics": [{"name": tp[0], "partition_indexes": [tp[1]]}], "coordinator_epoch": coordinator_epoch}]})
    except AdminError as e:
        admin._drop((node.host, node.port))
        raise Retriable(f"broker {node.node_id} ({node.host}:{node.port}): {e}") from None
    codes = [p.error_code for m in r.markers for t in m.topics for p in t.partitions]
    if not codes:
        raise AdminError("WriteTxnMarkers: the leader answered for no partition")
    for code in codes:
        if code in _RETRIABLE:
            raise Retriable(f"WriteTxnMarkers: {_code_name(code)}")
        if code:
            raise AdminError(f"WriteTxnMarkers: {_code_name(code)}")


# -- find-hanging -----------------------------------------------------------------------------

HANGING_COLUMNS = [("Topic", "topic"), ("Partition", "partition"), ("ProducerId", "producer_id"),
                   ("ProducerEpoch", "producer_epoch"), ("CoordinatorEpoch", "coordinator_epoch"),
                   ("StartOffset", "start_offset"), ("LastTimestamp", "last_timestamp"),
                   ("Duration(min)", "duration_min")]


def find_hanging(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        raise UsageError("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                         "of the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("The --partition argument requires --topic to be provided")
    if args.max_transaction_timeout < 0:
        raise UsageError("--max-transaction-timeout must not be negative")
    max_ms = args.max_transaction_timeout * 60_000
    # the partitions to search: the one given, or the topic's (or every topic's) with a replica on the broker
    if args.topic is not None and args.partition is not None:
        partitions = [(args.topic, args.partition)]
    else:
        _, parts = _retrying(lambda: _partition_nodes(admin, [args.topic] if args.topic is not None else None))
        partitions = sorted(tp for tp, p in parts.items()
                            if args.broker_id is None or args.broker_id in p.replica_nodes)
    try:
        states = producer_states(admin, partitions, args.broker_id) if partitions else {}
    except AdminError as e:
        raise AdminError(f"Failed to describe producers for {len(partitions)} partitions"
                         + (f" on broker {args.broker_id}" if args.broker_id is not None else "") + f": {e}") from None
    now = _now_ms()
    candidates = [(tp, s) for tp, ss in sorted(states.items()) for s in ss
                  if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_ms]
    hanging = []
    if candidates:
        pids = sorted({s.producer_id for _, s in candidates})
        listings, silent = _list_all(admin, {"state_filters": [], "producer_id_filters": pids, "duration_filter": -1,
                                             "transactional_id_pattern": None})
        if silent:
            raise AdminError(f"Failed to list transactions for {len(pids)} producers: "
                             f"{'; '.join(silent)} did not answer")
        tids = {pid: tid for _, tid, pid, _ in listings if pid in pids}
        descriptions: dict[str, TxnDescription | None] = {}
        for tid in sorted(set(tids.values())):
            d = describe_transaction(admin, tid)
            if d.error_code == ErrorCode.transactional_id_not_found:
                descriptions[tid] = None
            elif d.error_code:
                raise AdminError(f"Failed to describe {len(set(tids.values()))} transactions: "
                                 f"`{tid}`: {_code_name(d.error_code)}")
            else:
                descriptions[tid] = d
        for tp, s in candidates:
            known = tids.get(s.producer_id)
            desc = descriptions.get(known) if known is not None else None
            # the coordinator still writes this partition's marker while the transaction names it
            # (ongoing, or prepared with markers still to write)
            if desc is None or tp not in desc.partitions:
                hanging.append((tp, s))
    rows = [{"topic": tp[0], "partition": tp[1], "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
             "coordinator_epoch": s.coordinator_epoch, "start_offset": s.current_txn_start_offset,
             "last_timestamp": s.last_timestamp, "duration_min": (now - s.last_timestamp) // 60_000}
            for tp, s in hanging]
    _table(args, rows, HANGING_COLUMNS)
    return 0
