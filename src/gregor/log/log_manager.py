"""All partition logs of this broker: opening them at start-up (with recovery after a crash),
creating and deleting them, checkpoints, and the background work (time-based flush, retention,
compaction).

Files in ``log.dirs`` (Kafka's names):
- ``<topic>-<partition>/``                  one directory per partition
- ``recovery-point-offset-checkpoint``      offsets known to be fsynced, per partition
- ``log-start-offset-checkpoint``           log start offsets, per partition
- ``.kafka_cleanshutdown``                  written last at clean shutdown; skips recovery
- ``.lock``                                 held while a broker uses the directory
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gregor.cluster.topics import Topic, TopicRegistry, write_partition_metadata
from gregor.log.checkpoint import read_checkpoint, write_checkpoint
from gregor.log.partition_log import PartitionLog, now_ms, partition_dir_name

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"

TopicPartition = tuple[str, int]


class DataDirInUse(Exception):
    pass


class AppendNotifier:
    """Wakes long-polling fetches when a partition they wait on grows."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def notify(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, tps: Iterable[TopicPartition], timeout: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(tps)
        for tp in keys:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            pass
        finally:
            for tp in keys:
                s = self._waiters.get(tp)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[tp]


class LogManager:
    def __init__(self, data_dir: Path, defaults: dict[str, Any], registry: TopicRegistry,
                 clock: Callable[[], int] = now_ms) -> None:
        self.data_dir = data_dir
        self.defaults = defaults
        self.registry = registry
        self.clock = clock
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.notifier = AppendNotifier()
        self.clean_start = False
        self._lock_fd: int | None = None

    # -- start / stop ------------------------------------------------------------------------
    def startup(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(f"{self.data_dir} is in use by another broker (lock held on .lock)") from None
        marker = self.data_dir / CLEAN_SHUTDOWN
        self.clean_start = marker.exists()
        if self.clean_start:
            marker.unlink()
        else:
            log.info("no clean-shutdown marker in %s: recovering unflushed segments", self.data_dir)
        recovery = read_checkpoint(self.data_dir / RECOVERY_CHECKPOINT)
        self.registry.load()
        known: set[str] = set()
        for topic in list(self.registry.by_name.values()):
            for p in range(topic.partitions):
                known.add(partition_dir_name(topic.name, p))
                self._open(topic, p, recovery.get((topic.name, p), 0))
        for child in self.data_dir.iterdir():
            orphan = child.is_dir() and child.name not in known and not child.name.startswith(".")
            if orphan and (child.name.endswith("-delete") or _looks_like_partition(child.name)):
                log.warning("removing %s: not a partition of any known topic", child)
                shutil.rmtree(child, ignore_errors=True)

    def _open(self, topic: Topic, partition: int, recovery_point: int) -> PartitionLog:
        directory = self.data_dir / partition_dir_name(topic.name, partition)
        plog = PartitionLog(directory, topic.name, partition, self.topic_config(topic), self.clock)
        plog.open(self.clean_start, recovery_point)
        if not (directory / "partition.metadata").exists():
            write_partition_metadata(directory, topic.topic_id)
        self.logs[(topic.name, partition)] = plog
        return plog

    def shutdown(self) -> None:
        for plog in self.logs.values():
            plog.close()
        self.write_checkpoints(after_close=True)
        (self.data_dir / CLEAN_SHUTDOWN).write_bytes(b"")
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def write_checkpoints(self, after_close: bool = False) -> None:
        recovery = {tp: (pl.log_end_offset if after_close else pl.recovery_point) for tp, pl in self.logs.items()}
        write_checkpoint(self.data_dir / RECOVERY_CHECKPOINT, recovery)
        write_checkpoint(self.data_dir / LOG_START_CHECKPOINT,
                         {tp: pl.log_start_offset for tp, pl in self.logs.items()})

    # -- topics ------------------------------------------------------------------------------
    def topic_config(self, topic: Topic) -> dict[str, Any]:
        cfg = dict(self.defaults)
        cfg.update(topic.configs)
        return cfg

    def create_logs(self, topic: Topic, first_partition: int = 0) -> None:
        for p in range(first_partition, topic.partitions):
            self._open(topic, p, 0)

    def delete_logs(self, topic: Topic) -> None:
        for p in range(topic.partitions):
            plog = self.logs.pop((topic.name, p), None)
            if plog is not None:
                plog.delete()
                self.notifier.notify((topic.name, p))

    def reconfigure(self, topic: Topic) -> None:
        cfg = self.topic_config(topic)
        for p in range(topic.partitions):
            plog = self.logs.get((topic.name, p))
            if plog is not None:
                plog.config = cfg

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    # -- background work ---------------------------------------------------------------------
    def flush_due(self) -> None:
        now = self.clock()
        for plog in self.logs.values():
            if plog.unflushed_messages and now - plog.last_flush_ms >= int(plog.config["flush.ms"]):
                plog.flush()

    async def clean_due(self) -> int:
        """Compact every compacted partition whose dirty ratio reached its threshold."""
        from gregor.log.cleaner import clean_partition, dirty_ratio

        saved = 0
        for plog in list(self.logs.values()):
            if (plog.is_compacted and len(plog.segments) > 1
                    and dirty_ratio(plog) >= float(plog.config["min.cleanable.dirty.ratio"])):
                saved += await clean_partition(plog)
        return saved

    def enforce_retention(self) -> int:
        return sum(plog.delete_old_segments() for plog in list(self.logs.values()))


def _looks_like_partition(name: str) -> bool:
    head, _, tail = name.rpartition("-")
    return bool(head) and tail.isdigit()
