"""Produce (0): append each partition's record batch as its leader (the replication seam,
``ctx.replicas``: on one node the log's own append; in a cluster the leader's, with the
min.insync.replicas check for acks=all, which is then answered once the high watermark covers the
batch, within the request's timeout).

acks=0 gets no response; a failed acks=0 write closes the connection, as Kafka does.

Transactional batches (a request with a transactional id) are verified first when
transaction.partition.verification.enable is on (KIP-890): a producer's first batch of a
transaction in a partition is appended only once its coordinator confirmed the partition is in
the ongoing transaction (v12+, transactions V2, always: once the coordinator added it), and only
if no marker ended that transaction meanwhile, so that a late or stray batch can never open a
transaction nobody will end (a hanging transaction).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gregor.apis.authorization import TOPIC, TXN_ID, Op, allowed, allowed_names, enabled
from gregor.apis.handler import CloseConnection, RequestContext, handles
from gregor.log.partition_log import NO_VERIFICATION
from gregor.protocol import record_batch as rb
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.replica_manager import REPLICATION_ERRORS

log = logging.getLogger(__name__)

_IDEMPOTENCE_REFUSALS = frozenset({ErrorCode.out_of_order_sequence_number, ErrorCode.invalid_producer_epoch,
                                   ErrorCode.unknown_producer_id, ErrorCode.duplicate_sequence_number})


# what a produce answers when the coordinator could not be asked or is busy (Kafka: a retriable
# error older clients retry without a metadata refresh)
_VERIFY_RETRIABLE = frozenset({ErrorCode.concurrent_transactions, ErrorCode.network_exception,
                               ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                               ErrorCode.not_coordinator})


def _verification_error(code: ErrorCode) -> KafkaError:
    """A produce's answer to a failed KIP-890 verification (Kafka's ReplicaManager and
    AddPartitionsToTxnManager translations for produce v11 and older)."""
    if code in _VERIFY_RETRIABLE:
        return KafkaError(ErrorCode.not_enough_replicas,
                          f"Unable to verify the partition has been added to the transaction. Underlying error: "
                          f"{code.name.upper()}")
    if code in (ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state):
        return KafkaError(ErrorCode.invalid_txn_state, "Partition was not added to the transaction")
    if code == ErrorCode.producer_fenced:
        return KafkaError(ErrorCode.invalid_producer_epoch, "the producer's epoch is fenced by a newer one")
    return KafkaError(code, f"transaction verification failed: {code.name.upper()}")


async def _verify(ctx: RequestContext, req: Any) -> dict[tuple[str, int], Any]:
    """KIP-890 (transaction.partition.verification.enable): before a producer's first
    transactional batch in a partition (no transaction of it ongoing there), ask its coordinator
    whether the partition is in its ongoing transaction. Returns the guard each transactional
    batch appends with (None: its transaction was ongoing already), or the KafkaError it answers."""
    guards: dict[tuple[str, int], Any] = {}
    ask: dict[tuple[int, int], list[tuple[str, int]]] = {}  # (producer id, epoch) -> partitions
    for td in req.topic_data:
        for pd in td.partition_data:
            records = pd.records
            if not records or len(records) < rb.HEADER_SIZE:
                continue  # refused by the append
            try:
                h = rb.read_header(records, 0)
            except rb.InvalidBatch:
                continue  # the append refuses it (CORRUPT_MESSAGE)
            if not h.is_transactional or h.is_control:
                continue
            tp = (td.name, pd.index)
            try:
                guard = ctx.replicas.start_txn_verification(td.name, pd.index, h.producer_id, h.producer_epoch,
                                                             ctx.version >= 12)
            except KafkaError as e:
                guards[tp] = e
                continue
            guards[tp] = guard
            if guard is not None:
                ask.setdefault((h.producer_id, h.producer_epoch), []).append(tp)
    for (pid, epoch), tps in ask.items():
        # v12+ (transactions V2): the partition joins the transaction here, not by AddPartitionsToTxn
        codes = await ctx.transactions.verify(req.transactional_id, pid, epoch, tps, add=ctx.version >= 12)
        for tp in tps:
            code = codes.get(tp, ErrorCode.unknown_server_error)
            if code:
                guards[tp] = _verification_error(code)
    return guards


def _has_transactional_batch(req: Any) -> bool:
    """Whether a partition's records start with a transactional batch (Kafka's
    hasTransactionalRecords; a request's batches of one partition are all of one producer). On
    every request without a transactional id: one byte per partition, no header parsed (the
    attributes' low byte; a malformed batch is the append's to refuse)."""
    low = rb.ATTRIBUTES + 1
    for td in req.topic_data:
        for pd in td.partition_data:
            records = pd.records
            if records and len(records) > low and records[low] & rb.TRANSACTIONAL_BIT:
                return True
    return False


@handles(ApiKey.PRODUCE, 3, 12)
async def produce(ctx: RequestContext, req: Any) -> dict[str, Any] | None:
    acks = req.acks
    append = ctx.replicas.append_records
    timeout_s = req.timeout.total_seconds()
    denied: dict[str, KafkaError] = {}
    names = [td.name for td in req.topic_data]
    # Kafka: transactional batches need a transactional id (and WRITE on it), with or without an
    # authorizer: a transactional batch without one would open a transaction nobody can end
    if req.transactional_id is None and _has_transactional_batch(req):
        denied = dict.fromkeys(names, KafkaError(ErrorCode.transactional_id_authorization_failed,
                                                 "transactional records need the producer's transactional id"))
    elif enabled(ctx):  # WRITE on the transactional id, then WRITE on each topic
        if req.transactional_id is not None and not allowed(ctx, Op.WRITE, TXN_ID, req.transactional_id):
            denied = dict.fromkeys(names, KafkaError(ErrorCode.transactional_id_authorization_failed,
                                                     "Transactional Id authorization failed."))
        else:
            ok = allowed_names(ctx, Op.WRITE, TOPIC, names)
            denied = {n: KafkaError(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
                      for n in names if n not in ok}
    verified: dict[tuple[str, int], Any] = {}
    if req.transactional_id is not None and not denied and (
            ctx.version >= 12 or ctx.config["transaction.partition.verification.enable"]):
        verified = await _verify(ctx, req)
    waits: list[tuple[dict[str, Any], Any]] = []  # (partition response, awaitable of its error)
    responses = []
    for td in req.topic_data:
        name = td.name
        topic = ctx.topics.get(name)
        parts = []
        for pd in td.partition_data:
            p = {"index": pd.index, "error_code": ErrorCode.none, "base_offset": -1, "log_append_time": -1,
                 "log_start_offset": -1, "error_message": None}
            try:
                if denied and name in denied:
                    raise denied[name]
                if acks not in (-1, 0, 1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks} is not -1, 0 or 1")
                if topic is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
                if topic.internal:
                    raise KafkaError(ErrorCode.invalid_topic_exception,
                                     f"clients may not produce to internal topic '{name}'")
                if not pd.records:
                    raise KafkaError(ErrorCode.corrupt_message, "produce request without records")
                guard = verified.get((name, pd.index), NO_VERIFICATION)
                if isinstance(guard, KafkaError):
                    raise guard
                res, waiter = append(name, pd.index, pd.records, acks, timeout_s, guard)
                if waiter is not None:
                    waits.append((p, waiter))
                p["base_offset"] = res.base_offset
                p["log_append_time"] = res.log_append_time
                p["log_start_offset"] = res.log_start_offset
            except OSError as e:  # storage failures are StorageError (56) already; this is the net
                p["error_code"] = ErrorCode.kafka_storage_error
                p["error_message"] = f"storage error: {e}"
            except KafkaError as e:
                p["error_code"] = e.code
                p["error_message"] = e.message
                if e.code in _IDEMPOTENCE_REFUSALS:
                    # rare, and a client's exactly-once guarantee depends on what it does next
                    log.info("%s-%d: produce from %s refused: %s: %s", name, pd.index, ctx.client_host, e.code.name,
                             e.message)
                record_errors = getattr(e, "record_errors", None)
                if record_errors:  # v8+: which records of the batch were invalid
                    p["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                          for i, m in record_errors]
            parts.append(p)
        responses.append({"name": name, "partition_responses": parts})
    if waits:
        codes = await asyncio.gather(*(w for _, w in waits))
        for (p, _), code in zip(waits, codes, strict=True):
            if code:
                p["error_code"] = code
                p["error_message"] = REPLICATION_ERRORS.get(code)
    if acks == 0:
        if any(p["error_code"] for r in responses for p in r["partition_responses"]):
            # Kafka closes the connection so that a fire-and-forget producer notices the failure.
            raise CloseConnection
        return None
    return {"responses": responses, "throttle_time": 0}
