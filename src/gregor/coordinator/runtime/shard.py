"""What the runtime needs of a shard and of its records: the ``CoordinatorShard`` protocol and
the ``RecordSerde`` (Kafka: CoordinatorShard, and the serde CoordinatorRuntime is built with).

A group type (classic groups today; consumer-protocol groups and share groups later) plugs into
the runtime by providing a shard that implements ``CoordinatorShard`` and a ``RecordSerde`` for
its records; the runtime never imports a group type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gregor.coordinator.runtime.committed import CommittedReads

Completion = Callable[[BaseException | None], object]
"""Run once an operation's records are committed (with None), or with the error that means they
never will be (the append failed, the shard was unloaded): an answer to another request that the
operation decided, completed or failed accordingly (Kafka: the result's append future)."""


class CoordinatorShard(Protocol):
    """The state of one partition's coordinator, changed by records.

    Operations are plain calls on the shard that return a CoordinatorResult; the runtime appends
    their records, replays them (unless the result says its state is already applied), and
    answers once they are committed. ``committed_reads`` is where the shard keeps what its reads
    may see while writes are pending (runtime/committed.py); the runtime drives it.
    """

    @property
    def committed_reads(self) -> CommittedReads:
        """Where the shard keeps what its reads may see while writes are pending."""
        ...

    def replay(self, key: Any, value: Any) -> None:
        """Apply one record (``value`` None: a tombstone). Loading a partition is replaying it."""

    def on_loaded(self) -> None:
        """The partition has been replayed to its end: the shard is about to serve (schedule its
        timers, and so on)."""

    def on_unloaded(self) -> None:
        """The shard stops serving: complete whatever waits on it with NOT_COORDINATOR."""

    def take_completions(self) -> Sequence[Completion]:
        """Hand over (and forget) the completions the last operation deferred until its records
        are committed. The runtime runs them when it releases the operation's write, or with the
        error when the operation, its append or the shard fails."""
        ...


@runtime_checkable
class TransactionalShard(CoordinatorShard, Protocol):
    """A shard some of whose records are written inside producers' transactions (the group
    coordinator's TxnOffsetCommit): records of a transactional batch are replayed as pending for
    their producer, and the transaction's marker (a control batch in the same partition) commits
    or drops them (Kafka: the shard's replay with a producer id, and replayEndTransactionMarker)."""

    def replay_transactional(self, producer_id: int, producer_epoch: int, key: Any, value: Any) -> None:
        """Apply one record of the producer's transaction, pending until its marker."""

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The producer's transaction ended in this partition: COMMIT (True) or ABORT."""


@dataclass(frozen=True, slots=True)
class RecordSerde:
    """How a shard's records are written to and read from its partition. ``error`` is the
    exception ``decode_key`` and ``decode_value`` raise for a record they cannot read; the loader
    skips such a record with a warning instead of failing the partition."""

    encode_key: Callable[[Any], bytes]
    encode_value: Callable[[Any], bytes | None]
    decode_key: Callable[[bytes], Any]
    decode_value: Callable[[Any, bytes | None], Any]
    error: type[Exception]
