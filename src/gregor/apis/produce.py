"""Produce (0): append each partition's record batch to its log.

acks=0 gets no response; acks=1 and acks=-1 (all) are answered once the write returned, which on
one node is the same point (see docs/operations.md for what that survives under the flush policy).

In a cluster only the partition's leader appends (NOT_LEADER_OR_FOLLOWER elsewhere); acks=-1 is
refused with NOT_ENOUGH_REPLICAS when the ISR is smaller than min.insync.replicas and otherwise
answered once the high watermark covers the batch, within the request's timeout (replica_manager.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gregor.apis.handler import CloseConnection, RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.PRODUCE, 3, 11)
async def produce(ctx: RequestContext, req: Any) -> dict[str, Any] | None:
    acks = req.acks
    replicas = ctx.replicas
    waits: list[tuple[dict[str, Any], Any]] = []  # (partition response, awaitable of its error)
    notify = ctx.logs.notifier.notify
    responses = []
    for td in req.topic_data:
        name = td.name
        topic = ctx.topics.get(name)
        parts = []
        for pd in td.partition_data:
            p = {"index": pd.index, "error_code": ErrorCode.none, "base_offset": -1, "log_append_time": -1,
                 "log_start_offset": -1, "error_message": None}
            try:
                if acks not in (-1, 0, 1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks} is not -1, 0 or 1")
                if topic is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
                if topic.internal:
                    raise KafkaError(ErrorCode.invalid_topic_exception,
                                     f"clients may not produce to internal topic '{name}'")
                # one node: the local log; a cluster: the leader's replica (not every partition is here)
                plog = ctx.logs.get(name, pd.index) if replicas is None else None
                if plog is None and not (replicas is not None and 0 <= pd.index < topic.partitions):
                    raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                     f"partition {name}-{pd.index} does not exist")
                if not pd.records:
                    raise KafkaError(ErrorCode.corrupt_message, "produce request without records")
                if replicas is None:
                    assert plog is not None
                    res = plog.append(pd.records)
                else:
                    part, res, required = replicas.append(name, pd.index, pd.records, acks)
                    if acks == -1:
                        waits.append((p, replicas.wait_replicated(part, required, req.timeout.total_seconds())))
                notify((name, pd.index))
                p["base_offset"] = res.base_offset
                p["log_append_time"] = res.log_append_time
                p["log_start_offset"] = res.log_start_offset
            except OSError as e:  # storage failures are StorageError (56) already; this is the net
                p["error_code"] = ErrorCode.kafka_storage_error
                p["error_message"] = f"storage error: {e}"
            except KafkaError as e:
                p["error_code"] = e.code
                p["error_message"] = e.message
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
                p["error_message"] = _REPLICATION_ERRORS.get(code)
    if acks == 0:
        if any(p["error_code"] for r in responses for p in r["partition_responses"]):
            # Kafka closes the connection so that a fire-and-forget producer notices the failure.
            raise CloseConnection
        return None
    return {"responses": responses, "throttle_time": 0}


_REPLICATION_ERRORS = {
    ErrorCode.not_enough_replicas_after_append: "written, but the ISR shrank below min.insync.replicas",
    ErrorCode.request_timed_out: "the in-sync replicas did not all confirm the write within the request's timeout",
    ErrorCode.not_leader_or_follower: "leadership moved before the in-sync replicas confirmed the write",
}
