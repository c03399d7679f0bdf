"""Schemas of inter-broker APIs that kio (generated from Kafka 4's message definitions) no longer
has, written in the form of kio's generated classes so that the request walk, kio's reader and
Gregor's encoder use them as they use kio's own (``codec.request_schema`` falls back to this
module for those API keys).

ControlledShutdown (API 7) v3, from Kafka 2.8's ControlledShutdownRequest.json and
ControlledShutdownResponse.json (versions 0-3, flexible from 3): a broker about to stop asks the
controller to move the leadership of its partitions away. Gregor's brokers send and serve v3.

No ``from __future__ import annotations`` here: the field types must be types, as kio's are.
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

CONTROLLED_SHUTDOWN = 7


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CONTROLLED_SHUTDOWN)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    broker_id: BrokerId = field(metadata={"kafka_type": "int32"})
    """The id of the broker for which controlled shutdown has been requested."""
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """The broker epoch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CONTROLLED_SHUTDOWN)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    """The name of the topic."""
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The index of the partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(CONTROLLED_SHUTDOWN)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code."""
    remaining_partitions: tuple[RemainingPartition, ...]
    """The partitions that the broker still leads."""


# (api key, version) -> (request class, response class)
SCHEMAS: dict[tuple[int, int], tuple[Any, Any]] = {
    (CONTROLLED_SHUTDOWN, 3): (ControlledShutdownRequest, ControlledShutdownResponse),
}
