"""Group configs in a cluster: ZooKeeper holds them, every broker mirrors them.

A group's overrides (``consumer.session.timeout.ms``..., the steering keys ``gregor.assignment.*``)
are one persistent node, ``/config/groups/<group id>``, with the JSON of Kafka's entity config
nodes (``{"version":1,"config":{...}}``; the group id URL-encoded as Kafka's Sanitizer encodes
entity names). A group without overrides has no node.

- **Writes** (AlterConfigs, IncrementalAlterConfigs on a GROUP, through any broker): read the node,
  apply the operations, validate (the caller's ``compute``: syntax, bounds, and for a steering
  change the coordinator's view of the group), then write conditionally on the version read; a
  concurrent change makes the write start again from the newer node. The request is answered after
  the ZooKeeper write (and, on the group's coordinator, after the group's new epoch).
- **Every broker** watches ``/config/groups`` (children) and each group's node (data), as it
  watches each topic's ``/config/topics/<t>``, and keeps ``DynamicConfigs.groups`` equal to what
  ZooKeeper holds; the coordinator reads a group's configs there (session timeout, heartbeat
  interval, steering), so a change applies wherever it was made, and a new coordinator or a
  restarted broker reads the same configs.
- **A steering change** (any ``gregor.assignment.*`` value differs) seen by the broker that
  coordinates the group bumps the group's epoch, so that its next heartbeat computes a new target
  with the new steering; the brokers that do not coordinate it only mirror it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, unquote

from gregor.cluster.dynamic_configs import steering_part
from gregor.cluster.zk.client import BadVersionError, KazooException, NodeExistsError, NoNodeError, ZkClient
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from gregor.cluster.dynamic_configs import DynamicConfigs
    from gregor.cluster.metadata import ClusterMetadata


class GroupsCoordinated(Protocol):
    """What this module needs of the group coordinator (GroupCoordinatorService, a layer above)."""

    cluster: ClusterMetadata

    def partition_for(self, group_id: str) -> int: ...
    async def steering_changed(self, group_id: str) -> None: ...

log = logging.getLogger(__name__)

CONFIG_GROUPS = "/config/groups"
WRITE_ATTEMPTS = 10
LOAD_WAIT_S = 30.0  # how long a steering change waits for the group's shard to finish loading here


# -- the node ----------------------------------------------------------------------------------
def znode_name(group_id: str) -> str:
    """Kafka's Sanitizer: URL-encoded UTF-8 (``*`` and ``~`` too, space as %20); ``.`` and ``..``,
    which ZooKeeper refuses as names, are encoded as well."""
    name = quote(group_id, safe="").replace("~", "%7E")
    return name.replace(".", "%2E") if name in (".", "..") else name


def group_id_of(name: str) -> str:
    return unquote(name)


def group_config_path(group_id: str) -> str:
    return f"{CONFIG_GROUPS}/{znode_name(group_id)}"


def encode_group_config(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": {k: str(v) for k, v in sorted(config.items())}},
                      separators=(",", ":")).encode()


def decode_group_config(group_id: str, data: bytes | None) -> dict[str, str]:
    """The overrides in the node (empty node: none); ValueError if it is not Kafka's config JSON."""
    if not data:
        return {}
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{group_config_path(group_id)}: not JSON ({e})") from None
    cfg = obj.get("config") if isinstance(obj, dict) else None
    if not isinstance(cfg, dict):
        raise ValueError(f"{group_config_path(group_id)}: no 'config' map")
    return {str(k): str(v) for k, v in cfg.items()}


# -- the store ---------------------------------------------------------------------------------
class ZkGroupConfigs:
    """This broker's mirror of ``/config/groups`` and its writes there."""

    def __init__(self, zk: ZkClient, dynamic: DynamicConfigs, groups: GroupsCoordinated) -> None:
        self.zk = zk
        self.dynamic = dynamic
        self.groups = groups
        self._watched: dict[str, Callable[[], None] | None] = {}  # node name -> stop (None: starting)
        self._stop_children: Callable[[], None] | None = None
        self._bumps: dict[str, asyncio.Task[None]] = {}  # group -> its epoch bump under way here
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False
        self._stopped = False
        dynamic.group_store = self

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Read every group's configs (before this broker can coordinate a group), move the ones an
        older version kept in this broker's file to ZooKeeper, then watch for changes."""
        await self.zk.ensure_path(CONFIG_GROUPS)
        names = await self.zk.get_children(CONFIG_GROUPS)
        for name in names:
            got = await self.zk.get(f"{CONFIG_GROUPS}/{name}")
            self._node_changed(name, got[0] if got is not None else None, bump=False)
        await self._move_file_groups()
        self._stop_children = await self.zk.watch_children(CONFIG_GROUPS, self._children_changed)
        self._started = True
        if self.dynamic.groups:
            log.info("group configs from ZooKeeper: %s", self.dynamic.groups)

    async def _move_file_groups(self) -> None:
        for group_id, overrides in self.dynamic.file_groups.items():
            if not overrides:
                continue
            if group_id in self.dynamic.groups:
                log.warning("group %s: ignoring the configs %s of %s: ZooKeeper has %s", group_id, overrides,
                            self.dynamic.path, self.dynamic.groups[group_id])
                continue
            try:
                await self.zk.create(group_config_path(group_id), encode_group_config(overrides), makepath=True)
            except NodeExistsError:
                got = await self.zk.get(group_config_path(group_id))
                log.warning("group %s: ignoring the configs %s of %s: another broker wrote ZooKeeper's first",
                            group_id, overrides, self.dynamic.path)
                self._node_changed(znode_name(group_id), got[0] if got is not None else None, bump=False)
                continue
            log.info("group %s: configs %s moved from %s to ZooKeeper", group_id, overrides, self.dynamic.path)
            self._node_changed(znode_name(group_id), encode_group_config(overrides), bump=False)
        self.dynamic.forget_file_groups()

    async def stop(self) -> None:
        self._stopped = True
        if self._stop_children is not None:
            self._stop_children()
        for stop in self._watched.values():
            if stop is not None:
                stop()
        self._watched.clear()
        for t in list(self._tasks):
            t.cancel()

    # -- the mirror ----------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _children_changed(self, names: list[str]) -> None:
        if self._stopped:
            return
        for name in set(self._watched) - set(names):
            stop = self._watched.pop(name)
            if stop is not None:
                stop()
            self.apply(group_id_of(name), {})
        for name in names:
            if name not in self._watched:
                self._watched[name] = None
                self._spawn(self._watch(name))

    async def _watch(self, name: str) -> None:
        stop = await self.zk.watch_data(f"{CONFIG_GROUPS}/{name}", lambda data, _stat: self._node_changed(name, data))
        if self._stopped or name not in self._watched or self._watched[name] is not None:
            stop()  # gone (or stopped) meanwhile
            return
        self._watched[name] = stop

    def _node_changed(self, name: str, data: bytes | None, bump: bool = True) -> None:
        group_id = group_id_of(name)
        try:
            written = decode_group_config(group_id, data)
        except ValueError as e:
            log.error("group %s: ignoring its configs in ZooKeeper: %s", group_id, e)
            return
        usable, problems = self.dynamic.usable_group_overrides(group_id, written) if written else ({}, [])
        for p in problems:
            log.error("group %s: ignoring the config %s (from ZooKeeper)", group_id, p)
        self.apply(group_id, usable, bump)

    def apply(self, group_id: str, overrides: dict[str, str], bump: bool = True) -> asyncio.Task[None] | None:
        """Take the group's overrides as ZooKeeper holds them. A steering change bumps the group's
        epoch if this broker coordinates the group (``bump``; at start-up no group is coordinated
        here yet): the task doing it (or the one already doing it for an earlier change), None if
        there is none."""
        old = self.dynamic.groups.get(group_id, {})
        if overrides == old:
            return self._bumps.get(group_id)
        self.dynamic.mirror_group(group_id, overrides)
        log.log(logging.INFO if bump else logging.DEBUG, "group %s: configs now %s", group_id, overrides)
        if not bump or steering_part(old) == steering_part(overrides):
            return self._bumps.get(group_id)
        task = self._spawn(self._steering_changed(group_id))
        self._bumps[group_id] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._bumps.get(group_id) is t:
                del self._bumps[group_id]
            if not t.cancelled() and (e := t.exception()) is not None:
                log.warning("group %s: its steering changed but its epoch could not be bumped here: %s",
                            group_id, e.message if isinstance(e, KafkaError) else repr(e))

        task.add_done_callback(done)
        return task

    async def _steering_changed(self, group_id: str) -> None:
        """A new group epoch, where the group is coordinated (this broker leads its offsets
        partition: the shard is loaded, or loads with the configs already mirrored, and is bumped
        once loaded); elsewhere nothing: the coordinator's own watch does it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LOAD_WAIT_S
        cluster = self.groups.cluster
        while cluster.partition(OFFSETS_TOPIC, self.groups.partition_for(group_id)).leader == cluster.node_id:
            try:
                await self.groups.steering_changed(group_id)
                return
            except KafkaError as e:
                if e.code not in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator) \
                        or loop.time() > deadline:
                    raise
            await asyncio.sleep(0.1)

    async def refresh(self, group_id: str) -> None:
        """Read the group's node now rather than wait for its watch (which fires some milliseconds
        after a change): for a decision that must see a change its client made just before (a
        share-partition's first start offset follows share.auto.offset.reset)."""
        got = await self.zk.get(group_config_path(group_id))
        self._node_changed(znode_name(group_id), got[0] if got is not None else None)

    # -- writes --------------------------------------------------------------------------------
    async def alter(self, group_id: str, compute: Callable[[dict[str, str]], dict[str, str]],
                    validate_only: bool) -> None:
        """Change the group's overrides: ``compute(current)`` gives the new ones (or raises the
        request's error); written conditionally on the version read, again from the newer
        overrides if another change came first. Returns once written and mirrored here, and once
        the group has its new epoch if this broker coordinates it."""
        if not self._started or self._stopped:
            raise KafkaError(ErrorCode.request_timed_out, f"group {group_id}: this broker is not in the cluster now "
                                                          f"(starting or stopping); try again or ask another broker")
        path = group_config_path(group_id)
        try:
            for _ in range(WRITE_ATTEMPTS):
                got = await self.zk.get(path)
                try:
                    current = decode_group_config(group_id, got[0]) if got is not None else {}
                except ValueError as e:
                    log.error("group %s: overwriting its unreadable configs in ZooKeeper: %s", group_id, e)
                    current = {}
                new = compute(current)
                if validate_only:
                    return
                try:
                    if got is None:
                        if new:
                            await self.zk.create(path, encode_group_config(new), makepath=True)
                    elif not new:
                        await self.zk.delete(path, got[1].version)
                    else:
                        await self.zk.set(path, encode_group_config(new), got[1].version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue  # changed meanwhile: apply the operations to the newer overrides
                log.info("group %s: configs set to %s in ZooKeeper", group_id, new)
                task = self.apply(group_id, self.dynamic.usable_group_overrides(group_id, new)[0])  # as the watch
                if task is not None:
                    await asyncio.shield(task)
                return
        except KazooException as e:
            raise KafkaError(ErrorCode.request_timed_out,
                             f"group {group_id}: ZooKeeper did not answer ({type(e).__name__}); try again") from None
        raise KafkaError(ErrorCode.request_timed_out, f"group {group_id}: its configs kept changing; try again")
