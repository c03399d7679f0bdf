"""Produce (0): append each partition's record batch to its log.

acks=0 gets no response; acks=1 and acks=-1 (all) are answered once the write returned, which on
one node is the same point (see docs/operations.md for what that survives under the flush policy).
"""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import CloseConnection, RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.PRODUCE, 3, 11)
async def produce(ctx: RequestContext, req: Any) -> dict[str, Any] | None:
    acks = req.acks
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
                plog = ctx.logs.get(name, pd.index)
                if plog is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                     f"partition {name}-{pd.index} does not exist")
                if not pd.records:
                    raise KafkaError(ErrorCode.corrupt_message, "produce request without records")
                res = plog.append(pd.records)
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
    if acks == 0:
        if any(p["error_code"] for r in responses for p in r["partition_responses"]):
            # Kafka closes the connection so that a fire-and-forget producer notices the failure.
            raise CloseConnection
        return None
    return {"responses": responses, "throttle_time": 0}
