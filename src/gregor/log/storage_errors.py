"""Errors of the storage layer and the bounded cache of segment file descriptors.

Storage errors
--------------
An ``OSError`` from the file system (ENOSPC, EDQUOT, EIO, ...) never escapes a request handler:

- ``StorageError`` (KAFKA_STORAGE_ERROR, 56): the operation failed and left the files exactly as
  they were (a failed append is truncated back to the segment's size before it). The partition
  stays online; the request may be retried once the cause (a full disk) is gone.
- ``PartitionOffline`` (also 56): the files could not be brought back to a known state (the
  rollback itself failed, or an fsync failed, after which the page cache cannot be trusted). The
  partition answers KAFKA_STORAGE_ERROR to every produce and fetch until the broker restarts and
  recovers it from its last flushed offset, as Kafka takes a failed log directory offline.

Descriptor cache
----------------
Segments do not keep a file descriptor each. ``FdCache`` holds at most ``capacity`` open segment
files (``log.segment.open.files.max``), least recently used first out. A descriptor in use
(``acquire`` ... ``release``, e.g. by the cleaner's thread) is pinned and never closed under its
user; the cache may briefly exceed its capacity while more than ``capacity`` are pinned.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from typing import Protocol

from gregor.protocol.errors import ErrorCode, KafkaError

DEFAULT_OPEN_FILES = 1024


class StorageError(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.kafka_storage_error, message)


class PartitionOffline(StorageError):
    pass


class CorruptBatch(Exception):
    """A batch header inside a segment's valid range cannot be read (impossible length)."""

    def __init__(self, path: object, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt record batch at position {position}: {reason}")
        self.path = path
        self.position = position


def describe(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, "")
    return f"{name} {e.strerror}".strip() if e.strerror else str(e)


class _Opens(Protocol):
    def open_fd(self) -> int: ...


class FdCache:
    def __init__(self, capacity: int = DEFAULT_OPEN_FILES) -> None:
        self.capacity = max(1, capacity)
        self._fds: OrderedDict[_Opens, int] = OrderedDict()
        self._pins: dict[_Opens, int] = {}
        self._closing: dict[_Opens, int] = {}  # dropped while pinned: closed on the last release
        self._lock = threading.Lock()
        self.opens = 0  # files opened since start (a cache too small for the working set shows here)

    def __len__(self) -> int:
        return len(self._fds)

    def acquire(self, owner: _Opens) -> int:
        with self._lock:
            fd = self._fds.get(owner)
            if fd is not None:
                self._fds.move_to_end(owner)
            else:
                fd = owner.open_fd()
                self.opens += 1
                self._fds[owner] = fd
                self._evict()
            self._pins[owner] = self._pins.get(owner, 0) + 1
            return fd

    def release(self, owner: _Opens) -> None:
        with self._lock:
            n = self._pins.get(owner, 0) - 1
            if n > 0:
                self._pins[owner] = n
                return
            self._pins.pop(owner, None)
            fd = self._closing.pop(owner, None)
            if fd is not None:
                os.close(fd)
            elif len(self._fds) > self.capacity:
                self._evict()

    def drop(self, owner: _Opens) -> None:
        """Close ``owner``'s descriptor now (segment closed or deleted)."""
        with self._lock:
            fd = self._fds.pop(owner, None)
            if fd is not None and owner in self._pins:
                self._closing[owner] = fd
                return
        if fd is not None:
            os.close(fd)

    def _evict(self) -> None:
        if len(self._fds) <= self.capacity:
            return
        for owner in list(self._fds):
            if len(self._fds) <= self.capacity:
                break
            if owner in self._pins:
                continue
            os.close(self._fds.pop(owner))


FD_CACHE = FdCache()
