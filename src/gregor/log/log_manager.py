"""All partition logs of this broker: opening them at start-up (with recovery after a crash),
creating and deleting them, checkpoints, and the background work (time-based flush, retention,
compaction).

Files in ``log.dirs`` (Kafka's names):
- ``<topic>-<partition>/``                  one directory per partition
- ``recovery-point-offset-checkpoint``      offsets known to be fsynced, per partition
- ``log-start-offset-checkpoint``           log start offsets, per partition
- ``replication-offset-checkpoint``         high watermarks of replicated partitions (cluster only)
- ``.kafka_cleanshutdown``                  written last at clean shutdown; skips recovery
- ``.lock``                                 held while a broker uses the directory
- ``<topic>-<partition>.<topic id>-delete/`` a partition being deleted (see ``delete_logs``)

After a clean shutdown nothing is read per partition at start-up: a partition's offsets come from
the checkpoints and its files are opened on first use (``PartitionLog.open_lazily``). A clean
shutdown flushes and snapshots only the partitions written since they were loaded.

In a cluster a broker hosts only some partitions of a topic (``hosts_all_partitions`` False: only
the partition directories present are opened at start-up; ``create_partition_log`` and
``delete_partition_log`` add and remove one), and the replica manager makes each hosted log
replicated (``make_replicated``), its high watermark read back from
``replication-offset-checkpoint`` (``write_hwm_checkpoint``).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from gregor.log.checkpoint import read_checkpoint, write_checkpoint
from gregor.log.partition_log import PartitionLog, now_ms, partition_dir_name
from gregor.log.storage_errors import FD_CACHE, StorageError, describe
from gregor.log.topic_registry import Topic, TopicRegistry, write_partition_metadata

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"

TopicPartition = tuple[str, int]
DELETE_SUFFIX = "-delete"


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
                 clock: Callable[[], int] = now_ms, hosts_all_partitions: bool = True) -> None:
        """``hosts_all_partitions``: every partition of every registered topic lives here (one
        node; a missing directory is created at start-up). False in a cluster: only the partition
        directories present are opened."""
        self.data_dir = data_dir
        self.defaults = defaults
        self.registry = registry
        self.clock = clock
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.notifier = AppendNotifier()
        self.clean_start = False
        self._lock_fd: int | None = None
        self._tombstones: list[Path] = []  # deleted partitions' directories, registry not yet saved
        self.hosts_all_partitions = hosts_all_partitions
        # high watermarks read from replication-offset-checkpoint, for logs not yet made replicated
        self.hwm_checkpoint: dict[TopicPartition, int] = {}
        self._any_replicated = False

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
        starts = read_checkpoint(self.data_dir / LOG_START_CHECKPOINT)  # DeleteRecords moves these
        self.hwm_checkpoint = self._read_hwm_checkpoint()
        self.registry.load()
        keep = self._finish_deletions()
        present = None if self.hosts_all_partitions else set(os.listdir(self.data_dir))
        known: set[str] = set()
        lazy = 0
        for topic in list(self.registry.by_name.values()):
            for p in range(topic.partitions):
                name = partition_dir_name(topic.name, p)
                if present is not None and name not in present:
                    continue  # a partition of which this broker holds no replica
                known.add(name)
                tp = (topic.name, p)
                if self.clean_start and tp in recovery and tp in starts:
                    plog = PartitionLog(self.data_dir / partition_dir_name(topic.name, p), topic.name, p,
                                        self.topic_config(topic), self.clock)
                    plog.open_lazily(recovery[tp], starts[tp])
                    self.logs[tp] = plog
                    lazy += 1
                    continue
                plog = self._open(topic, p, recovery.get(tp, 0))
                plog.restore_log_start_offset(starts.get(tp, 0))  # never beyond what recovery kept
        if lazy:
            log.info("%d partitions will be loaded on first use", lazy)
        for child in self.data_dir.iterdir():
            orphan = (child.name not in known and not child.name.startswith(".") and child not in keep
                      and child.is_dir())  # names first: no stat(2) per known partition
            if orphan and (child.name.endswith(DELETE_SUFFIX) or _looks_like_partition(child.name)):
                log.warning("removing %s: not a partition of any known topic", child)
                shutil.rmtree(child, ignore_errors=True)

    def _finish_deletions(self) -> set[Path]:
        """A ``<topic>-<p>.<topic id>-delete`` directory whose topic id is still registered is a
        deletion a crash (or a full disk) interrupted: finish it by dropping the topic from the
        registry. Returns the directories to keep because the registry could not be saved."""
        pending = []
        for child in self.data_dir.iterdir():
            if not (child.name.endswith(DELETE_SUFFIX) and child.is_dir()):
                continue
            tp_name, _, id_hex = child.name[: -len(DELETE_SUFFIX)].rpartition(".")
            topic = self.registry.get(tp_name.rpartition("-")[0])
            if topic is not None and topic.topic_id.hex == id_hex:
                pending.append(topic.name)
        if not pending:
            return set()
        for name in set(pending):
            log.warning("finishing the deletion of topic %s (interrupted before the registry was saved)", name)
            self.registry.forget(name)
        try:
            self.registry.save()
        except OSError as e:
            log.error("cannot save the topic registry (%s): deleted partitions are kept as *-delete "
                      "directories until it can be", describe(e))
            self._tombstones = [c for c in self.data_dir.iterdir() if c.name.endswith(DELETE_SUFFIX)]
            return set(self._tombstones)
        return set()

    def _open(self, topic: Topic, partition: int, recovery_point: int, clean: bool | None = None) -> PartitionLog:
        directory = self.data_dir / partition_dir_name(topic.name, partition)
        plog = PartitionLog(directory, topic.name, partition, self.topic_config(topic), self.clock)
        plog.open(self.clean_start if clean is None else clean, recovery_point)
        if not (directory / "partition.metadata").exists():
            try:
                write_partition_metadata(directory, topic.topic_id, durable=False)
            except OSError as e:  # informational file: a full disk must not stop the start
                log.warning("%s: cannot write partition.metadata (%s)", directory, describe(e))
        self.logs[(topic.name, partition)] = plog
        return plog

    def shutdown(self) -> None:
        """Flush and close every partition written since it was loaded, write the checkpoints,
        and, only if all of that worked, the clean-shutdown marker (otherwise the next start
        recovers from the recovery points)."""
        failed: set[TopicPartition] = set()
        for tp, plog in self.logs.items():
            try:
                plog.close()
            except (StorageError, OSError) as e:
                log.error("%s-%d: closing failed (%s): it will be recovered at the next start", tp[0], tp[1], e)
                failed.add(tp)
        ok = self.write_checkpoints(after_close=True, failed=failed)
        if ok and not failed and not self._tombstones:
            try:
                (self.data_dir / CLEAN_SHUTDOWN).write_bytes(b"")
            except OSError as e:
                log.error("cannot write the clean-shutdown marker (%s): the next start recovers", describe(e))
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def write_checkpoints(self, after_close: bool = False, failed: set[TopicPartition] | None = None) -> bool:
        """Both checkpoint files (atomic replacements: a failed write leaves the previous one,
        which is only older, hence safe). Also retries saving the registry after a deletion that
        could not save it. False if a write failed."""
        self.finish_pending_deletions()
        failed = failed or set()
        recovery = {tp: (pl.log_end_offset if after_close and tp not in failed else pl.recovery_point)
                    for tp, pl in self.logs.items()}
        try:
            write_checkpoint(self.data_dir / RECOVERY_CHECKPOINT, recovery)
            write_checkpoint(self.data_dir / LOG_START_CHECKPOINT,
                             {tp: pl.log_start_offset for tp, pl in self.logs.items()})
        except OSError as e:
            log.error("writing the offset checkpoints failed (%s); the previous ones stay", describe(e))
            return False
        return self.write_hwm_checkpoint()

    # -- high watermarks (replicated logs) ---------------------------------------------------
    def _read_hwm_checkpoint(self) -> dict[TopicPartition, int]:
        try:
            return read_checkpoint(self.data_dir / REPLICATION_CHECKPOINT)
        except (ValueError, OSError) as e:  # the leaders' high watermarks replace what is lost
            log.error("cannot read %s (%s): high watermarks start at the log start offsets",
                      REPLICATION_CHECKPOINT, e)
            return {}

    def make_replicated(self, plog: PartitionLog) -> None:
        """The replica manager hosts ``plog`` as a replica: its high watermark is kept apart from
        its log end offset from now on, starting from ``replication-offset-checkpoint`` (the log
        start offset when the file has none for it). Idempotent."""
        if plog.replicated:
            return
        plog.replicated = True
        self._any_replicated = True
        tp = (plog.topic, plog.partition)
        plog.set_high_watermark_from_checkpoint(self.hwm_checkpoint.pop(tp, 0))

    def write_hwm_checkpoint(self) -> bool:
        """Write ``replication-offset-checkpoint`` (Kafka's OffsetCheckpointFile format) with the
        high watermark of every replicated log, and the checkpointed value of hosted logs not made
        replicated yet (the replica manager may not have reached them since start-up). Nothing is
        written while no log was ever replicated (one node). False if the write failed (the
        previous file stays, only older)."""
        entries = self.hwm_checkpoint_entries()
        return True if entries is None else self.write_hwm_entries(entries)

    def hwm_checkpoint_entries(self) -> dict[tuple[str, int], int] | None:
        """What ``replication-offset-checkpoint`` holds now (None: nothing to write), read on the
        event loop, which is the only place the logs change."""
        if not self._any_replicated and not self.hwm_checkpoint:
            return None
        entries = {tp: v for tp, v in self.hwm_checkpoint.items() if tp in self.logs}
        for tp, plog in list(self.logs.items()):
            if plog.replicated:
                entries[tp] = plog.high_watermark
        return entries

    def write_hwm_entries(self, entries: dict[tuple[str, int], int]) -> bool:
        """Write them (from any thread); False if the write failed (the previous file stays)."""
        try:
            write_checkpoint(self.data_dir / REPLICATION_CHECKPOINT, entries)
        except OSError as e:
            log.error("writing %s failed (%s); the previous one stays", REPLICATION_CHECKPOINT, describe(e))
            return False
        return True

    # -- topics ------------------------------------------------------------------------------
    def topic_config(self, topic: Topic) -> dict[str, Any]:
        cfg = dict(self.defaults)
        cfg.update(topic.configs)
        return cfg

    def build_logs(self, topic: Topic, first_partition: int = 0,
                   partitions: Iterable[int] | None = None) -> list[PartitionLog]:
        """Create the files of new partitions ``first_partition..`` (or of ``partitions``):
        directory, empty first segment, ``partition.metadata``; and their in-memory logs, not yet
        registered (``register``). Thread-safe: touches nothing shared, so many partitions are
        built in a worker thread. On failure the directories made so far are removed and
        StorageError raised."""
        cfg = self.topic_config(topic)
        made: list[PartitionLog] = []
        try:
            for p in range(first_partition, topic.partitions) if partitions is None else partitions:
                plog = PartitionLog(self.data_dir / partition_dir_name(topic.name, p), topic.name, p, cfg, self.clock)
                made.append(plog)
                plog.create_files()
                write_partition_metadata(plog.dir, topic.topic_id, durable=False)
                plog.open_new()
            _fsync_dir(self.data_dir)
        except (OSError, StorageError) as e:
            for plog in made:
                shutil.rmtree(plog.dir, ignore_errors=True)
            reason = describe(e) if isinstance(e, OSError) else str(e)
            raise StorageError(f"cannot create the partitions of {topic.name}: {reason}") from None
        return made

    def register(self, logs: list[PartitionLog]) -> None:
        for plog in logs:
            self.logs[(plog.topic, plog.partition)] = plog
        # The checkpoints may still hold a deleted topic of the same name (recovery point, log
        # start moved by DeleteRecords): rewrite them now, as Kafka does, so that a crash before
        # the next periodic checkpoint cannot apply them to the new partitions.
        self.write_checkpoints()

    def discard(self, logs: list[PartitionLog]) -> None:
        """Undo ``build_logs`` (the registry could not be saved)."""
        for plog in logs:
            plog.close_files()
            shutil.rmtree(plog.dir, ignore_errors=True)

    def create_logs(self, topic: Topic, first_partition: int = 0) -> None:
        self.register(self.build_logs(topic, first_partition))

    def create_partition_log(self, topic: Topic, partition: int) -> PartitionLog:
        """The log of one partition of ``topic`` (a broker of a cluster hosts only some): the
        registered one if there is one, else the directory's if present (recovered as after a
        crash: no checkpoint covers it), else a new one (``build_logs`` + ``register``).
        StorageError if it cannot be created."""
        tp = (topic.name, partition)
        plog = self.logs.get(tp)
        if plog is not None:
            return plog
        if (self.data_dir / partition_dir_name(topic.name, partition)).is_dir():
            try:
                return self._open(topic, partition, 0, clean=False)
            except OSError as e:
                raise StorageError(f"cannot open {topic.name}-{partition}: {describe(e)}") from None
        (plog,) = self.build_logs(topic, partitions=[partition])
        self.register([plog])
        return plog

    def delete_partition_log(self, topic: str, partition: int) -> None:
        """Remove one partition's log (this broker no longer holds a replica of it): dropped and
        closed, its directory renamed to ``<topic>-<p>.<random>-delete`` then removed (in a worker
        thread when an event loop runs; a leftover is removed at the next start-up). The topic
        stays registered: the suffix is not the topic's id, so a leftover is never taken for an
        interrupted topic deletion."""
        tp = (topic, partition)
        plog = self.logs.pop(tp, None)
        if plog is not None:
            plog.close_files()
            self.notifier.notify(tp)
        self.hwm_checkpoint.pop(tp, None)
        renamed = self._rename_for_deletion([self.data_dir / partition_dir_name(topic, partition)],
                                            uuid.uuid4().hex)
        if not renamed:
            return
        try:
            asyncio.get_running_loop().run_in_executor(None, _remove_dirs, renamed)
        except RuntimeError:  # no event loop: remove now
            _remove_dirs(renamed)

    def delete_logs(self, topic: Topic) -> list[Path]:
        """First step of deleting a topic the registry already forgot (in memory): drop and close
        its partitions (no file access). Returns their directories for ``purge``."""
        dirs = []
        for p in range(topic.partitions):
            plog = self.logs.pop((topic.name, p), None)
            if plog is not None:
                plog.close_files()
                self.notifier.notify((topic.name, p))
            dirs.append(self.data_dir / partition_dir_name(topic.name, p))
        return dirs

    def mark_deleted(self, topic: Topic, dirs: list[Path], empty: bool = True) -> list[Path]:
        """Rename each directory to ``<topic>-<p>.<topic id>-delete`` (a rename needs no free
        space), then (``empty``) delete the files inside: the space is free. File access only, so
        it runs in a worker thread. If the broker stops before the registry is saved, the next
        start sees ``-delete`` directories carrying the topic's id and finishes the deletion,
        whatever step it stopped at. Returns the renamed directories."""
        tombstones = self._rename_for_deletion(dirs, topic.topic_id.hex)
        if empty:
            _empty_dirs(tombstones)
        return tombstones

    def _rename_for_deletion(self, dirs: list[Path], tag: str) -> list[Path]:
        """Rename each directory to ``<name>.<tag>-delete`` (removed in place if it cannot be
        renamed), fsync the data directory; returns the renamed ones."""
        tombstones = []
        for src in dirs:
            dst = self.data_dir / f"{src.name}.{tag}{DELETE_SUFFIX}"
            try:
                os.rename(src, dst)
                tombstones.append(dst)
            except FileNotFoundError:
                continue
            except OSError as e:
                log.error("cannot rename %s for deletion (%s): removing it in place", src, describe(e))
                shutil.rmtree(src, ignore_errors=True)
        _fsync_dir(self.data_dir, quiet=True)
        return tombstones

    async def purge(self, topic: Topic, dirs: list[Path]) -> None:
        """The rest of a deletion: ``mark_deleted`` in a worker thread, the registry saved (on the
        event loop: it must not change while it is written), the emptied directories removed in a
        worker thread. If the registry cannot be saved (disk still full), the empty ``-delete``
        directories stay as the record of the deletion, and saving is retried with every
        checkpoint (``finish_pending_deletions``) and at the next start."""
        tombstones = await asyncio.to_thread(self.mark_deleted, topic, dirs)
        self._tombstones.extend(tombstones)
        done = self._save_after_deletion()
        if done:
            await asyncio.to_thread(_remove_dirs, done)

    def purge_sync(self, topic: Topic, dirs: list[Path]) -> None:
        self._tombstones.extend(self.mark_deleted(topic, dirs))
        _remove_dirs(self._save_after_deletion())

    def _save_after_deletion(self) -> list[Path]:
        """Save the registry; the tombstones it makes unnecessary (none if saving failed)."""
        if not self._tombstones:
            return []
        try:
            self.registry.save()
        except OSError as e:
            log.error("cannot save the topic registry after a deletion (%s); will retry", describe(e))
            return []
        done, self._tombstones = self._tombstones, []
        self.write_checkpoints()  # drop the deleted partitions' entries (see ``register``)
        return done

    def finish_pending_deletions(self) -> None:
        _remove_dirs(self._save_after_deletion())

    def reconfigure(self, topic: Topic) -> None:
        cfg = self.topic_config(topic)
        for p in range(topic.partitions):
            plog = self.logs.get((topic.name, p))
            if plog is not None:
                plog.config = cfg

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def high_watermark(self, topic: str, partition: int) -> int | None:
        plog = self.logs.get((topic, partition))
        return plog.high_watermark if plog is not None else None

    def high_watermarks(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, high watermark) of every partition."""
        for (topic, partition), plog in self.logs.items():
            yield topic, partition, plog.high_watermark

    # -- background work ---------------------------------------------------------------------
    def flush_due(self) -> None:
        now = self.clock()
        for plog in self.logs.values():
            if plog.unflushed_messages and now - plog.last_flush_ms >= int(plog.config["flush.ms"]):
                try:
                    plog.flush()
                except StorageError as e:  # the partition went offline; logged by the segment
                    log.error("%s-%d: time-based flush failed: %s", plog.topic, plog.partition, e)

    async def clean_due(self) -> int:
        """Compact every compacted partition whose dirty ratio reached its threshold."""
        from gregor.log.cleaner import clean_partition, dirty_ratio

        saved = 0
        for plog in list(self.logs.values()):
            if (plog.is_compacted and len(plog.segments) > 1
                    and dirty_ratio(plog) >= float(plog.config["min.cleanable.dirty.ratio"])):
                saved += await clean_partition(plog)
        return saved

    def enforce_retention(self, load_per_check: int = 100) -> int:
        """Retention on every loaded partition, and on up to ``load_per_check`` partitions not
        loaded since a clean start (loading them, a few at a time, so that a check never stalls
        the broker): an idle partition's old data still expires, a few checks later."""
        deleted = 0
        budget = load_per_check
        for plog in list(self.logs.values()):
            try:
                if not plog.loaded and budget > 0 and "delete" in str(plog.config["cleanup.policy"]):
                    budget -= 1
                    plog.ensure_loaded()
                deleted += plog.delete_old_segments()
            except StorageError as e:
                log.error("%s-%d: retention failed: %s", plog.topic, plog.partition, e)
        return deleted

    @property
    def open_files(self) -> int:
        """Segment files open now (the descriptor cache)."""
        return len(FD_CACHE)


def _empty_dirs(dirs: list[Path]) -> None:
    for d in dirs:
        try:
            children = list(d.iterdir())
        except FileNotFoundError:
            continue
        for c in children:
            if c.is_dir():
                shutil.rmtree(c, ignore_errors=True)
            else:
                c.unlink(missing_ok=True)


def _remove_dirs(dirs: list[Path]) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def _fsync_dir(path: Path, quiet: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        if not quiet:
            raise


def _looks_like_partition(name: str) -> bool:
    head, _, tail = name.rpartition("-")
    return bool(head) and tail.isdigit()
