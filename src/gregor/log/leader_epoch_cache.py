"""Leader epoch cache of one partition (Kafka: LeaderEpochFileCache, KIP-101/KIP-279).

An ordered list of (leader epoch, start offset): the first offset written by each leader epoch.
Epochs and start offsets both grow strictly along the list. A follower asks the leader for the
end offset of its latest epoch (OffsetForLeaderEpoch) and truncates its log to where the two
histories part (``end_offset_for``).

Persisted in the partition directory as ``leader-epoch-checkpoint``, Kafka's text format:

    0          <- version
    2          <- entry count
    0 0        <- epoch start_offset
    3 1500

and written atomically (``gregor.atomic_file``). Every change that removes entries (truncation
from the end, a non-monotonic assignment, ``clear``) is written before the method returns; an
assignment that only appends may be deferred (``durable=False``), the partition log then writes it
at its next flush, before its recovery point passes the new entry's start offset: after a crash,
every batch from the recovery point on is walked again and carries its epoch, so a deferred
entry lost with the crash is rebuilt from the batch that introduced it.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from gregor.atomic_file import write_atomically

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class CorruptEpochCheckpoint(ValueError):
    """A ``leader-epoch-checkpoint`` that is not Kafka's format (or not in order)."""


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]] | None:
    """The (epoch, start offset) entries of a checkpoint file, or None if there is no file.
    CorruptEpochCheckpoint if it cannot be parsed."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CorruptEpochCheckpoint(f"{path}: not text") from None
    lines = text.splitlines()
    try:
        if len(lines) < 2 or int(lines[0]) != _VERSION:
            raise CorruptEpochCheckpoint(f"{path}: unsupported version or truncated header")
        count = int(lines[1])
        entries = []
        for line in lines[2:]:
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) != 2:
                raise CorruptEpochCheckpoint(f"{path}: malformed line {line!r}")
            entries.append((int(fields[0]), int(fields[1])))
    except ValueError as e:
        if isinstance(e, CorruptEpochCheckpoint):
            raise
        raise CorruptEpochCheckpoint(f"{path}: {e}") from None
    if len(entries) != count:
        raise CorruptEpochCheckpoint(f"{path}: expected {count} entries, found {len(entries)}")
    for i, (epoch, start) in enumerate(entries):
        if epoch < 0 or start < 0 or (i and (epoch <= entries[i - 1][0] or start <= entries[i - 1][1])):
            raise CorruptEpochCheckpoint(f"{path}: entries out of order or negative at line {i + 3}")
    return entries


def write_epoch_checkpoint(path: Path, entries: Iterable[tuple[int, int]]) -> None:
    items = list(entries)
    lines = [str(_VERSION), str(len(items))] + [f"{e} {s}" for e, s in items]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


class LeaderEpochCache:
    """(epoch, start offset) entries, ascending in both. ``path`` None: kept in memory only.

    ``latest_epoch`` is a plain attribute (-1 when empty): the append path compares against it
    and nothing else."""

    def __init__(self, path: Path | None = None, entries: Iterable[tuple[int, int]] = ()) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self.latest_epoch = UNDEFINED_EPOCH
        self.dirty = False  # changed since last written
        for epoch, start in entries:
            self._put(epoch, start)
        self.dirty = False

    @classmethod
    def load(cls, path: Path) -> LeaderEpochCache | None:
        """The cache saved at ``path``; None if the file is missing or corrupt (logged), in which
        case the caller rebuilds it from the log's batches."""
        try:
            entries = read_epoch_checkpoint(path)
        except CorruptEpochCheckpoint as e:
            log.warning("%s; the leader epoch cache is rebuilt from the log", e)
            return None
        if entries is None:
            return None
        return cls(path, entries)

    # -- queries -----------------------------------------------------------------------------
    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def __len__(self) -> int:
        return len(self._epochs)

    def latest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[-1], self._starts[-1]) if self._epochs else None

    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._starts[0]) if self._epochs else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch for ``requested_epoch`` (KIP-279),
        as Kafka 2.8's cache:

        - the latest epoch: (it, ``log_end_offset``);
        - an older epoch: (largest epoch <= requested, start offset of the first epoch above the
          requested one), i.e. where the requested epoch's history ends here;
        - below the first epoch: (requested, start offset of the first epoch): the older history
          was removed from this log, so the follower keeps nothing past this log's first epoch;
        - undefined (-1), above the latest epoch, or an empty cache: (-1, -1) (UNDEFINED).
        """
        epochs = self._epochs
        if requested_epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote ``offset`` (the entry with the largest start at or below it); -1
        below the first entry or when empty. Past the log end this is the latest epoch."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    # -- changes -----------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int, durable: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed.

        As Kafka 2.8: the latest epoch again at the same or a later offset changes nothing. Any
        other assignment wins over the entries it conflicts with: entries at the end whose epoch
        is >= ``epoch`` or whose start is >= ``start_offset`` are removed (logged when that drops
        history), then the entry is appended. ``durable=False`` defers the write of a pure append
        (see the module docstring); a removal is always written at once."""
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        removed = self._put(epoch, start_offset)
        if durable or removed:
            self.flush()
        return True

    def _put(self, epoch: int, start_offset: int) -> list[tuple[int, int]]:
        """Append the entry after removing those it conflicts with; returns the removed ones."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        removed = self._remove_from_end(lambda e, s: e >= epoch or s >= start_offset)
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            log.warning("%s: leader epoch entry (%d, %d) removed conflicting entries %s",
                        self.path, epoch, start_offset, removed)
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self.latest_epoch = epoch
        self.dirty = True
        return removed

    def _remove_from_end(self, match: Callable[[int, int], bool]) -> list[tuple[int, int]]:
        removed = []
        while self._epochs and match(self._epochs[-1], self._starts[-1]):
            removed.append((self._epochs.pop(), self._starts.pop()))
        removed.reverse()
        if removed:
            self.latest_epoch = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH
            self.dirty = True
        return removed

    def truncate_from_end(self, end_offset: int) -> bool:
        """Remove the entries starting at or after ``end_offset`` (the log was truncated there).
        Written at once when anything was removed; returns whether anything was."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return False
        self._remove_from_end(lambda _e, s: s >= end_offset)
        self.flush()
        return True

    def truncate_from_start(self, start_offset: int, durable: bool = True) -> bool:
        """The log now starts at ``start_offset``: entries starting at or below it go, except the
        last of them, which now starts at ``start_offset`` (its epoch still wrote the records
        there). Returns whether the cache changed. Deferring the write is safe: opening the log
        applies this again with its log start offset."""
        starts = self._starts
        n = bisect.bisect_right(starts, start_offset)
        if n == 0 or (n == 1 and starts[0] == start_offset):
            return False
        epoch = self._epochs[n - 1]
        del self._epochs[: n - 1]
        del self._starts[: n - 1]
        self._epochs[0], self._starts[0] = epoch, start_offset
        self.dirty = True
        if durable:
            self.flush()
        return True

    def clear(self) -> None:
        """Remove every entry (the log was emptied), written at once."""
        self._epochs.clear()
        self._starts.clear()
        self.latest_epoch = UNDEFINED_EPOCH
        self.dirty = True
        self.flush()

    def flush(self) -> None:
        """Write the checkpoint file if the cache changed since it was last written. OSError
        (a full disk) leaves the cache dirty, so that a later flush tries again."""
        if not self.dirty:
            return
        if self.path is not None:
            write_epoch_checkpoint(self.path, self.entries)
        self.dirty = False
