"""The transaction coordinator's contract: its configuration, and the plain requests and results
its handlers (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions) and the marker service use.

Errors are **codes in the results**, never exceptions: a refused request writes nothing and
answers with Kafka's code (AddPartitionsToTxn per partition, as its v4 response does). Only the
runtime raises, for a shard that is not here or still loading (KafkaError NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE), before any operation runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partition numbers by topic, in the order given (requests, records and answers list them so)."""
    out: dict[str, list[int]] = {}
    for topic, p in partitions:
        out.setdefault(topic, []).append(p)
    return out

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """The broker keys the coordinator reads, with Kafka's names and defaults (``from_mapping``).

    ``log_value_version``: the TransactionLogValue version written, 1 (flexible, with the tagged
    producer ids and client version) as Kafka writes from transaction.version 1 on; 0 for a
    cluster whose Kafka brokers cannot read v1."""

    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms (7 days)
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms (15 minutes)
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_transactions_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_transactional_ids_interval_ms: int = 3_600_000
    log_value_version: int = 1

    KEYS = {
        "transactional.id.expiration.ms": "transactional_id_expiration_ms",
        "transaction.max.timeout.ms": "transaction_max_timeout_ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "abort_timed_out_transactions_interval_ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "remove_expired_transactional_ids_interval_ms",
    }

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> TransactionConfig:
        """From broker config values by Kafka's key names (absent keys keep Kafka's defaults)."""
        kw = {attr: int(values[key]) for key, attr in cls.KEYS.items() if values.get(key) is not None}
        return cls(**kw)


# -- results ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class AddPartitionsResult:
    """``error``: the transaction's (NONE when the partitions were looked at one by one);
    ``partitions``: every requested partition's code, as AddPartitionsToTxn v4 answers (a
    transaction-level error is every partition's code)."""

    error: ErrorCode
    partitions: dict[TopicPartition, ErrorCode] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    """``producer_id``/``producer_epoch``: what the producer continues with (EndTxn v5+,
    transactions V2: the bumped epoch, or the next producer id at epoch 0 when the epoch ran out);
    -1 for V1 and on errors."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TxnMarkers:
    """Markers the service must write (WriteTxnMarkers' TxnMarkerEntry): a COMMIT or ABORT
    control batch with this producer id and epoch and the coordinator epoch in every partition
    of the transaction. Once every one is written (or dropped: a partition whose topic is gone),
    the service calls the shard's ``complete_markers(transactional_id, producer_id,
    producer_epoch)``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    coordinator_epoch: int
    transaction_version: int  # the client's transaction version (0 or 2): 2 writes markers of TV2


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One DescribeTransactions answer. ``state``: Kafka's name ("Ongoing", "CompleteAbort", ...)."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    topics: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    """ListTransactions' answer from one shard; ``unknown_state_filters``: the filter's state
    names Kafka does not know (they match nothing)."""

    transactions: list[ListedTransaction]
    unknown_state_filters: list[str] = field(default_factory=list)
