"""The aborted-transaction index of one segment: ``<base offset, 20 digits>.txnindex`` beside its
``.log``, in Kafka's format (TransactionIndex, AbortedTxn). One 34-byte big-endian entry per
transaction aborted by a marker in that segment:

    version int16 (0), producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64

``lastOffset`` is the abort marker's offset and ``lastStableOffset`` the partition's last stable
offset once the transaction completed: a read_committed fetch stops searching later segments at an
entry whose last stable offset is past what it fetched (Kafka's collectAbortedTxns).

Entries are appended to the file when the marker is appended (aborts are rare; recovery rebuilds
the file of every segment it re-reads) and fsynced with the segment. The file is read on first use
only: most segments have none, and ``exists`` says so without touching the disk when the caller
knows (the directory listing at load).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class TransactionIndex:
    def __init__(self, path: Path, exists: bool | None = None) -> None:
        """``exists``: whether the file is there, when the caller knows (None: look on first use)."""
        self.path = path
        self._entries: list[AbortedTxn] | None = [] if exists is False else None
        self.unflushed = False
        self._rewrite_due = False  # an append's write failed: the whole file is written at flush

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out: list[AbortedTxn] = []
        usable = len(data) - len(data) % ENTRY_SIZE
        if usable != len(data):
            log.warning("%s: %d trailing bytes are not a whole entry; ignored", self.path, len(data) - usable)
        for version, pid, first, last, lso in _ENTRY.iter_unpack(data[:usable]):
            if version != VERSION:
                log.warning("%s: entry of version %d; the rest of the file is ignored", self.path, version)
                break
            out.append(AbortedTxn(pid, first, last, lso))
        return out

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (in offset order: its last offset is above every earlier one) and write it
        to the file. If the write fails the entry stays in memory and the whole file is written
        again at the next flush (which fails the partition if that fails too)."""
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} is not after the last "
                             f"one ({entries[-1].last_offset})")
        entries.append(txn)
        self.unflushed = True
        if self._rewrite_due:
            return
        try:
            with open(self.path, "ab") as f:
                f.write(txn.encode())
        except OSError as e:
            log.error("%s: appending an aborted transaction failed (%s); written again at the next flush",
                      self.path, e)
            self._rewrite_due = True

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the index with ``entries`` (recovery); no file when there are none."""
        self._entries = list(entries)
        self._rewrite()

    def _rewrite(self) -> None:
        entries = self.entries
        self._rewrite_due = False
        if not entries:
            self.path.unlink(missing_ok=True)
            self.unflushed = False
            return
        tmp = self.path.with_suffix(".txnindex.tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(e.encode() for e in entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.unflushed = False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions whose marker is at or after ``offset`` (the log was
        cut there)."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            self._entries = keep
            self._rewrite()

    def flush(self) -> None:
        """fsync the appended entries (or write the whole file after a failed append). OSError."""
        if not self.unflushed:
            return
        if self._rewrite_due:
            self._rewrite()
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self.unflushed = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.unflushed = False

    def collect(self, fetch_offset: int, upper_bound_offset: int, out: list[AbortedTxn]) -> bool:
        """Append to ``out`` the aborted transactions overlapping [fetch_offset, upper_bound_offset)
        (marker at or after the fetch offset, first offset below the bound). True when the search
        is complete: an entry's last stable offset reached the bound, so no later segment can
        hold a transaction overlapping the range (Kafka's TxnIndexSearchResult)."""
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                out.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return True
        return False

    def forget(self) -> None:
        """The segment is being deleted (its files are removed by the caller)."""
        self._entries = []
        self.unflushed = False
        self._rewrite_due = False
