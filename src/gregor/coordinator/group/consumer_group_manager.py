"""Consumer-protocol groups (KIP-848): ConsumerGroupHeartbeat, leaving, the session and rebalance
timeouts, and the replay of the groups' records.

Each operation reads the groups as replayed and returns a CoordinatorResult: the records that
say what changes, and the response. The runtime appends the records and replays them
(``replay``), which is the only way a consumer group changes, so loading a partition rebuilds
exactly the groups a live coordinator had, member epochs included. A heartbeat writes, in
Kafka's order: the member's metadata when it changed, the subscription metadata and the group
epoch when the subscriptions (or their topics' partition counts) changed, the new target
assignment when the group epoch is ahead of it, and the member's current assignment when its
reconciliation moved (``reconciliation.reconcile``).

The rules and error codes are Kafka's (GroupMetadataManager's consumer part); the comments name
the cases.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from gregor.assignment import assignors, steering
from gregor.coordinator.group.api import (
    ConsumerGroupView,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    ConsumerMemberView,
)
from gregor.coordinator.group.consumer_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    GroupState,
    MemberState,
    TopicId,
    is_subset,
)
from gregor.coordinator.group.context import ShardContext
from gregor.coordinator.group.metadata_hash import group_hash
from gregor.coordinator.group.model import ClassicGroup
from gregor.coordinator.group.reconciliation import reconcile
from gregor.coordinator.group.subscriptions import (
    RegexSubscriptions,
    ResolvedRegex,
    TopicCatalogue,
    resolved_from,
    subscribed_topic_ids,
    subscribed_topics,
)
from gregor.coordinator.runtime.result import CoordinatorResult, Record
from gregor.protocol.consumer_offsets import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    TopicMetadata,
)
from gregor.protocol.errors import ErrorCode, KafkaError

HASH_REFRESH_MS = 1000  # a group's topics' hash is recomputed at most this often while they stay the same

log = logging.getLogger("gregor.coordinator")

Result = CoordinatorResult[ConsumerHeartbeatResult]
T = TypeVar("T")
CONSUMER_GROUP_KEYS = (ConsumerGroupMetadataKey, ConsumerGroupPartitionMetadataKey, ConsumerGroupMemberMetadataKey,
                       ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                       ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupRegularExpressionKey)


# refusals worth a line in the log (the others are a member's ordinary way back into its group)
_LOGGED = {ErrorCode.invalid_request, ErrorCode.unsupported_assignor, ErrorCode.group_max_size_reached,
           ErrorCode.unreleased_instance_id, ErrorCode.fenced_instance_id, ErrorCode.group_id_not_found,
           ErrorCode.invalid_regular_expression}


TARGETS_CHECK_KEY = "consumer-targets-after-load"


def session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def rebalance_key(group_id: str, member_id: str) -> str:
    return f"consumer-rebalance-{group_id}-{member_id}"


def classic_join_key(group_id: str, member_id: str) -> str:
    """A classic member told to rejoin must do so within its rebalance timeout."""
    return f"consumer-join-{group_id}-{member_id}"


def classic_sync_key(group_id: str, member_id: str) -> str:
    """A classic member that joined must send SyncGroup within its rebalance timeout."""
    return f"consumer-sync-{group_id}-{member_id}"


def _blank(value: str | None) -> bool:
    """Kafka's isEmpty for these ids: not null, and nothing but blanks."""
    return value is not None and not value.strip()


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_request, message)


def _sorted(a: Assignment) -> dict[TopicId, tuple[int, ...]]:
    return {t: tuple(sorted(ps)) for t, ps in a.items()}


# -- records ------------------------------------------------------------------------------------
def member_record(group_id: str, m: ConsumerMember) -> Record:
    return (ConsumerGroupMemberMetadataKey(group_id, m.member_id),
            ConsumerGroupMemberMetadataValue(
                instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex, rebalance_timeout_ms=m.rebalance_timeout_ms,
                server_assignor=m.server_assignor, classic_member_metadata=m.classic))


def _epochs_of(m: ConsumerMember, partitions: dict[TopicId, tuple[int, ...]]) -> dict[TopicId, tuple[int, ...]]:
    """Each partition's assignment epoch, in the order the record lists the partitions."""
    return {t: tuple(m.assignment_epochs.get((t, p), max(m.member_epoch, 0)) for p in ps)
            for t, ps in partitions.items()}


def current_assignment_record(group_id: str, m: ConsumerMember) -> Record:
    assigned, pending = _sorted(m.assigned), _sorted(m.pending_revocation)
    return (ConsumerGroupCurrentMemberAssignmentKey(group_id, m.member_id),
            ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=int(m.state),
                assigned_partitions=assigned, partitions_pending_revocation=pending,
                assigned_epochs=_epochs_of(m, assigned), pending_revocation_epochs=_epochs_of(m, pending)))


def target_record(group_id: str, member_id: str, a: Assignment) -> Record:
    return (ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
            ConsumerGroupTargetAssignmentMemberValue(topic_partitions=_sorted(a)))


def epoch_record(group_id: str, epoch: int, metadata_hash: int = 0, creation_time_ms: int = -1) -> Record:
    return (ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(
        epoch=epoch, metadata_hash=metadata_hash, creation_time_ms=creation_time_ms))


def new_epoch_records(group: ConsumerGroup, epoch: int, metadata_hash: int, now_ms: int) -> list[Record]:
    """The group's next epoch with the hash of its topics as they are now (as Kafka 4.1, every
    epoch record carries it), its creation time (set with its first epoch), and the tombstone of
    a ConsumerGroupPartitionMetadata record still in the log."""
    created = group.creation_time_ms if group.creation_time_ms >= 0 or group.group_epoch > 0 else now_ms
    out: list[Record] = [epoch_record(group.group_id, epoch, metadata_hash, created)]
    if group.has_partition_metadata_record:
        out.append((ConsumerGroupPartitionMetadataKey(group.group_id), None))
    return out


def subscription_metadata_record(group_id: str, metadata: dict[str, tuple[TopicId, int]]) -> Record:
    """Kafka 4.0's per-topic record, which 4.1 replaced with the hash: read, tombstoned, never
    written by the coordinator (kept for tests of that reading)."""
    topics = [TopicMetadata(topic_id=tid, topic_name=name, num_partitions=n)
              for name, (tid, n) in sorted(metadata.items())]
    return (ConsumerGroupPartitionMetadataKey(group_id), ConsumerGroupPartitionMetadataValue(topics=topics))


def removal_records(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order: current assignment, target, then the member."""
    return [(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
            (ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
            (ConsumerGroupMemberMetadataKey(group_id, member_id), None)]


def group_tombstones(group_id: str) -> list[Record]:
    return [(ConsumerGroupTargetAssignmentMetadataKey(group_id), None),
            (ConsumerGroupPartitionMetadataKey(group_id), None), (ConsumerGroupMetadataKey(group_id), None)]


class OnlineUpgrade(Protocol):
    """A consumer-protocol member arrives at a classic group with members (migration.Upgrade)."""

    def problem(self, classic: ClassicGroup) -> str | None: ...

    def convert(self, classic: ClassicGroup, records: list[Record]) -> ConsumerGroup: ...

    def complete(self, consumer: ConsumerGroupManager, classic: ClassicGroup, group: ConsumerGroup) -> None: ...


class OnlineDowngrade(Protocol):
    """A member leaves or is fenced: the records that convert the group to a classic one instead,
    or None (migration.Downgrade)."""

    def __call__(self, consumer: ConsumerGroupManager, group: ConsumerGroup,
                 leaving: ConsumerMember) -> list[Record] | None: ...


class ConsumerGroupManager:
    """``catalogue``: the topics regular expressions match (None: no topic matches);
    ``upgrade`` and ``downgrade``: the online migrations (migration.py; None: a heartbeat that
    would upgrade a classic group is refused, and no group is downgraded)."""

    def __init__(self, ctx: ShardContext, catalogue: TopicCatalogue | None = None,
                 upgrade: OnlineUpgrade | None = None, downgrade: OnlineDowngrade | None = None) -> None:
        self.ctx = ctx
        # subscriptions by regular expression
        self.regexes = RegexSubscriptions(ctx, self._refresh_regexes, catalogue)
        self.on_fence = downgrade
        self.upgrade = upgrade
        # the classic group a heartbeat is upgrading, and the consumer group it becomes
        self._upgraded: tuple[ClassicGroup, ConsumerGroup] | None = None

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.ctx.consumer_groups

    def _now(self) -> int:
        return self.ctx.clock()

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------
    def heartbeat(self, req: ConsumerHeartbeatRequest) -> Result:
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(req)
            return self._heartbeat(req)
        except KafkaError as e:
            log.log(logging.INFO if e.code in _LOGGED else logging.DEBUG,
                    "[GroupId %s] ConsumerGroupHeartbeat of member %s (epoch %d, client %s %s): %s: %s", req.group_id,
                    req.member_id, req.member_epoch, req.client_id, req.client_host, e.code.name.upper(), e.message)
            return CoordinatorResult([], ConsumerHeartbeatResult(e.code, e.message or None, req.member_id or None,
                                                                 req.member_epoch))

    def _validate(self, req: ConsumerHeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, in its order (v1's member id is
        checked by the API handler first). A string of blanks counts as empty, as Kafka's trim()."""
        epoch = req.member_epoch
        if (epoch > 0 or epoch == LEAVE_EPOCH) and _blank(req.member_id):
            raise _invalid("MemberId can't be empty.")
        if _blank(req.group_id):
            raise _invalid("GroupId can't be empty.")
        if _blank(req.instance_id):
            raise _invalid("InstanceId can't be empty.")
        if _blank(req.rack_id):
            raise _invalid("RackId can't be empty.")
        if epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise _invalid("TopicPartitions must be empty when (re-)joining.")
            # an empty list of names (or an empty regex) is a member subscribed to nothing, as Kafka 4.1+
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise _invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                               "(re-)joining.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                raise _invalid("InstanceId can't be null.")
        elif epoch < STATIC_LEAVE_EPOCH:
            raise _invalid("MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.ctx.config.consumer_assignors:
            raise KafkaError(ErrorCode.unsupported_assignor,
                             f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                             f"{', '.join(self.ctx.config.consumer_assignors)}.")

    def _group(self, group_id: str, create: bool, records: list[Record]) -> ConsumerGroup:
        """The consumer group (Kafka: getOrMaybeCreateConsumerGroup); a joining member converts a
        classic group: an empty one always (its committed offsets stay), one with members when the
        online upgrade is allowed (migration.py). The conversion's records go to ``records``."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if group_id in self.ctx.share_groups:
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        classic = self.ctx.groups.get(group_id)
        if classic is not None and create:
            if not classic.members:
                log.info("[GroupId %s] Converting the empty classic group to a consumer group", group_id)
                records.append((GroupMetadataKey(group_id), None))
                return ConsumerGroup(group_id, state_since_ms=self._now())
            problem = (self.upgrade.problem(classic) if self.upgrade is not None
                       else "the online upgrade is not available here")
            if problem is not None:
                log.info("[GroupId %s] Cannot upgrade the classic group to a consumer group: %s", group_id, problem)
                raise KafkaError(ErrorCode.group_id_not_found,
                                 f"Cannot upgrade classic group {group_id} to consumer group because {problem}.")
            assert self.upgrade is not None
            converted = self.upgrade.convert(classic, records)
            self._upgraded = (classic, converted)  # completed if the heartbeat is taken
            return converted
        if classic is not None:
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if not create:
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        return ConsumerGroup(group_id, state_since_ms=self._now())  # comes into being when replayed

    def _member(self, group: ConsumerGroup, req: ConsumerHeartbeatRequest, member_id: str,
                records: list[Record]) -> ConsumerMember:
        joining = req.member_epoch == JOIN_EPOCH
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise KafkaError(ErrorCode.unknown_member_id,
                                     f"Member {member_id} is not a member of group {group.group_id}.")
                log.info("[GroupId %s] Member %s joins the consumer group", group.group_id, member_id)
                return ConsumerMember(member_id)
            if member.uses_classic_protocol:
                raise KafkaError(ErrorCode.unknown_member_id, f"Member {member_id} is a classic member.")
            if not joining:
                _check_epoch(member, req)
            return member
        existing = group.static_member(req.instance_id)
        if joining:
            if existing is None:
                log.info("[GroupId %s] Static member %s with instance id %s joins the consumer group",
                         group.group_id, member_id, req.instance_id)
                return ConsumerMember(member_id)
            if existing.member_id == member_id:
                return existing.with_subscription(member_epoch=0, previous_member_epoch=0)
            # a consumer-protocol member replaces another only once it left (epoch -2); a classic
            # one (which never says so) at once: a static member upgraded to the consumer protocol
            if existing.member_epoch != STATIC_LEAVE_EPOCH and not existing.uses_classic_protocol:
                raise KafkaError(ErrorCode.unreleased_instance_id,
                                 f"Static member {member_id} with instance id {req.instance_id} cannot join the "
                                 f"group because the instance id is owned by member {existing.member_id}.")
            # the static member comes back under a new member id: it takes the old one's place and target
            new = existing.with_subscription(member_id=member_id, member_epoch=0, previous_member_epoch=0)
            records += removal_records(group.group_id, existing.member_id)
            records.append(member_record(group.group_id, new))
            records.append(target_record(group.group_id, member_id, group.target_of(existing.member_id)))
            records.append(current_assignment_record(group.group_id, new))
            log.info("[GroupId %s] Static member with instance id %s rejoins as %s, replacing %s",
                     group.group_id, req.instance_id, member_id, existing.member_id)
            return new
        if existing is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise KafkaError(ErrorCode.fenced_instance_id,
                             f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
                             f"{existing.member_id}.")
        _check_epoch(existing, req)
        return existing

    def _heartbeat(self, req: ConsumerHeartbeatRequest) -> Result:
        cfg = self.ctx.config
        records: list[Record] = []
        joining = req.member_epoch == JOIN_EPOCH
        self._upgraded = None
        group = self._group(req.group_id, joining, records)
        member_id = req.member_id or str(uuid.uuid4())
        if len(group.members) >= cfg.consumer_max_size and member_id not in group.members:
            raise KafkaError(ErrorCode.group_max_size_reached,
                             f"The consumer group has reached its maximum capacity of {cfg.consumer_max_size} "
                             f"members.")
        member = self._member(group, req, member_id, records)
        rejoined = joining and member_id in group.members  # it abandoned what it had: starts again from 0
        if rejoined:
            member = member.with_subscription(member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                                              assigned={}, pending_revocation={}, assignment_epochs={})
        updated = member.with_subscription(
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                    if req.subscribed_topic_names is not None else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex or None if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=req.client_id, client_host=req.client_host, classic=None)
        reconciled = self.advance(group, member, updated, req.owned, rejoined, records)
        self._schedule_session_timeout(group.group_id, member_id)
        old_static = group.static_member(req.instance_id)
        if old_static is not None and old_static.member_id != member_id:
            self._cancel_timers(group.group_id, old_static.member_id)  # replaced: only once all checks passed
        full = joining or (req.rebalance_timeout_ms != -1 and req.owned is not None
                           and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        changed = reconciled.assigned != member.assigned
        response = ConsumerHeartbeatResult(ErrorCode.none, None, member_id, reconciled.member_epoch,
                                           self.heartbeat_interval_ms(group.group_id),
                                           dict(reconciled.assigned) if full or changed else None)
        if req.owned is not None:
            group.reported[member_id] = dict(req.owned)
        self._report_slow_phase(group)
        if self._upgraded is not None and self.upgrade is not None:
            self.upgrade.complete(self, *self._upgraded)
            self._upgraded = None
        return CoordinatorResult(records, response)

    def advance(self, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                owned: Assignment | None, rejoined: bool, records: list[Record]) -> ConsumerMember:
        """The member as ``updated`` says (its metadata), then the group epoch, the target
        assignment and the member's reconciliation as they follow; their records go to
        ``records``. Shared by consumer-protocol heartbeats and classic JoinGroups."""
        member_id = updated.member_id
        bump = updated.subscribed_topic_names != member.subscribed_topic_names or group.group_epoch == 0
        if not updated.same_metadata(member):
            records.append(member_record(group.group_id, updated))
        # a regex new to the group is validated and resolved by a refresh; one nobody uses is tombstoned
        regexes = self.regexes.update(group, updated)
        records += regexes.records
        bump |= regexes.bump
        # the subscribed topics' ids and partition counts (new partitions, topics created or deleted)
        steady = group.members.get(member_id) is member and updated.same_subscription(member)

        def members_after() -> dict[str, ConsumerMember]:
            """The group's members as this heartbeat leaves them (a replaced static member out)."""
            out = {mid: m for mid, m in group.members.items() if m.instance_id is None
                   or m.instance_id != updated.instance_id}
            out[member_id] = updated
            return out

        if steady:  # the group's subscriptions are as replayed: per topic, not per member
            metadata = self._metadata_of(self._group_topic_names(group))
        else:
            metadata = self._subscription_metadata(members_after(), group.resolved_regexes)
        group.subscription_metadata = metadata  # derived from the topics: kept as seen
        metadata_hash = self._hash_of(metadata, group)
        if metadata_hash != group.metadata_hash:
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records += new_epoch_records(group, group_epoch, metadata_hash, self._now())
            log.info("[GroupId %s] Bumped group epoch to %d", group.group_id, group_epoch)
        if group_epoch > group.assignment_epoch:
            target_epoch = group_epoch
            target = self._target_assignment(group, group_epoch, members_after(), metadata, records).get(member_id,
                                                                                                       {})
        else:
            target_epoch = group.assignment_epoch
            replaced = group.static_member(updated.instance_id)
            if member_id not in group.target and replaced is not None:
                target = group.target_of(replaced.member_id)  # a static member back under a new id
            else:
                target = group.target_of(member_id)

        def partition_epoch(topic_id: TopicId, partition: int) -> int:
            if rejoined and group.owner_of(topic_id, partition) == member_id:
                return -1  # what it held before it rejoined is free for it
            return group.partition_epoch(topic_id, partition)

        reconciled = reconcile(updated, target_epoch, target, partition_epoch, owned)
        if not reconciled.same_assignment(member) or rejoined:
            records.append(current_assignment_record(group.group_id, reconciled))
            # a classic member has join and sync timeouts instead (classic_members.py; as Kafka)
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS and not reconciled.uses_classic_protocol:
                self._schedule_rebalance_timeout(group.group_id, member_id, reconciled.member_epoch,
                                                 reconciled.rebalance_timeout_ms)
            else:
                self.ctx.timer.cancel(rebalance_key(group.group_id, member_id))
        return reconciled

    def _report_slow_phase(self, group: ConsumerGroup) -> None:
        """Logs once per state change a group that stays outside Stable longer than
        group.consumer.slow.phase.ms, naming the members that hold it up."""
        since = group.state_since_ms
        if since < 0 or since == group.slow_reported_since or group.state in (GroupState.STABLE, GroupState.EMPTY):
            return
        waited = self._now() - since
        if waited < self.ctx.config.consumer_slow_phase_ms:
            return
        group.slow_reported_since = since
        phase, holders = group.phase()
        who = "; ".join(f"{mid} ({group.members[mid].client_id}) must {why}" for mid, why, _ in holders) or "-"
        log.warning("[GroupId %s] %s for %.1f s (group epoch %d): held up by %s", group.group_id, phase,
                    waited / 1000, group.group_epoch, who)

    def _subscription_metadata(self, members: dict[str, ConsumerMember], resolved: dict[str, ResolvedRegex]
                               ) -> dict[str, tuple[TopicId, int]]:
        return self._metadata_of(subscribed_topics(members.values(), resolved))

    def _hash_of(self, metadata: dict[str, tuple[TopicId, int]], group: ConsumerGroup | None = None) -> int:
        """The KIP-1101 hash of the group's subscribed topics that exist. For ``group``'s own
        topics it is kept HASH_REFRESH_MS while they are the same (a heartbeat asks every time;
        a change of racks alone is seen within that)."""
        now = self._now()
        if group is not None and group.hash_cache is not None:
            topics, h, until = group.hash_cache
            if now < until and topics == metadata:
                return h
        h = group_hash({name: self.ctx.topic_hash(name) for name in metadata})
        if group is not None:
            group.hash_cache = (dict(metadata), h, now + HASH_REFRESH_MS)
        return h

    def _metadata_of(self, names: Iterable[str]) -> dict[str, tuple[TopicId, int]]:
        out: dict[str, tuple[TopicId, int]] = {}
        for name in names:
            meta = self.ctx.topic_metadata(name)
            if meta is not None:
                out[name] = meta
        return out

    @staticmethod
    def _group_topic_names(group: ConsumerGroup) -> set[str]:
        """The topics the group's members subscribe to, from the group's per-topic counts."""
        names = set(group.topic_subscribers)
        for regex in group.regex_subscribers:
            r = group.resolved_regexes.get(regex)
            if r is not None:
                names |= r.topics
        return names

    def _refresh_regexes(self, group_id: str) -> CoordinatorResult[None]:
        """Resolves the group's regexes again (a timer operation): their records, and a new group
        epoch when their topics changed."""
        group = self.groups.get(group_id)
        if group is None:
            return CoordinatorResult()
        records, changed, resolved = self.regexes.refresh(group)
        metadata = self._subscription_metadata(group.members, resolved)
        group.subscription_metadata = metadata
        metadata_hash = self._hash_of(metadata)
        if changed or metadata_hash != group.metadata_hash:
            records += new_epoch_records(group, group.group_epoch + 1, metadata_hash, self._now())
            log.info("[GroupId %s] Bumped group epoch to %d", group_id, group.group_epoch + 1)
        return CoordinatorResult(records)

    def _target_assignment(self, group: ConsumerGroup, epoch: int, members: dict[str, ConsumerMember],
                           metadata: dict[str, tuple[TopicId, int]], records: list[Record]) -> dict[str, Assignment]:
        """The target assignment for ``epoch``, steered as the operator said (pins, isolation,
        freeze: the group's gregor.assignment.* configs); records for each member whose target
        changed, then the assignment epoch (Kafka's TargetAssignmentBuilder)."""
        started = time.perf_counter()
        name, result = self._steered_assignment(group, members, metadata)
        took_ms = (time.perf_counter() - started) * 1000
        steered = group.steered
        for mid in members:
            new = {t: ps for t, ps in result.get(mid, {}).items() if ps}
            if new != group.target_of(mid) or mid not in group.target:
                records.append(target_record(group.group_id, mid, new))
        records.append((ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
                        ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch)))
        log.info("[GroupId %s] Computed a new target assignment for epoch %d with '%s' assignor in %.1f ms%s",
                 group.group_id, epoch, name, took_ms,
                 "; " + "; ".join(steered.notes) if steered is not None and steered.notes else "")
        return {mid: {t: ps for t, ps in a.items() if ps} for mid, a in result.items()}

    def _steered_assignment(self, group: ConsumerGroup, members: dict[str, ConsumerMember],
                            metadata: dict[str, tuple[TopicId, int]]) -> tuple[str, dict[str, Assignment]]:
        """(the assignor's name, what it assigns each member) with the group's steering now; the
        steering's notes go to ``group.steered``."""
        name = self._assignor_name(members)
        specs = {}
        infos = {}
        subscribed = subscribed_topic_ids(members, group.resolved_regexes, metadata)
        for mid, m in members.items():
            specs[mid] = assignors.MemberSpec(mid, m.instance_id, m.rack_id, subscribed[mid], group.target_of(mid))
            infos[mid] = steering.MemberInfo(mid, m.instance_id, m.client_host, specs[mid])
        partitions = {tid: n for tid, n in metadata.values()}
        spec = assignors.GroupSpec(specs, partitions)
        steered = steering.steer(spec, infos, self._topics_of(group, metadata), self.steering_of(group.group_id))
        group.steered = steered
        return name, assignors.assignor(name).assign(steered.spec)

    def _check_targets_after_load(self) -> CoordinatorResult[None]:
        """A loaded group whose target assignment is not what its steering gives now gets a new
        group epoch, so that its next heartbeat computes the target again. This happens when the
        steering changed while another broker coordinated the group and that broker lost the
        partition before it wrote the epoch bump (or a broker restarted between the two). A group
        whose target is due anyway (group epoch ahead of the assignment epoch) is left alone."""
        records: list[Record] = []
        for group in self.groups.values():
            if not group.members or group.group_epoch > group.assignment_epoch:
                continue
            _name, result = self._steered_assignment(group, dict(group.members), group.subscription_metadata)
            now = {mid: {t: frozenset(ps) for t, ps in result.get(mid, {}).items() if ps} for mid in group.members}
            was = {mid: {t: frozenset(ps) for t, ps in group.target_of(mid).items() if ps} for mid in group.members}
            if now != was:
                records += new_epoch_records(group, group.group_epoch + 1, group.metadata_hash, self._now())
                log.info("[GroupId %s] The target assignment loaded does not follow the group's steering (%s): "
                         "bumped group epoch to %d", group.group_id, self.steering_of(group.group_id).to_config(),
                         group.group_epoch + 1)
        return CoordinatorResult(records)

    def _topics_of(self, group: ConsumerGroup, metadata: dict[str, tuple[TopicId, int]]
                   ) -> dict[str, tuple[TopicId, int]]:
        """The subscribed topics, and those the group's pins name."""
        out = dict(metadata)
        for pin in self.steering_of(group.group_id).pins:
            if pin.topic not in out and (meta := self.ctx.topic_metadata(pin.topic)) is not None:
                out[pin.topic] = meta
        return out

    def steering_of(self, group_id: str) -> steering.Steering:
        """The group's steering (its gregor.assignment.* group configs); none if they cannot be read
        (they were validated when set; logged)."""
        try:
            return steering.Steering.from_config(self.ctx.group_settings(group_id))
        except steering.SteeringError as e:
            log.warning("[GroupId %s] ignoring the group's steering: %s", group_id, e)
            return steering.Steering()

    def steering_problems(self, group_id: str, wanted: steering.Steering) -> list[str]:
        """Why ``wanted`` cannot steer the group as it is now (empty: it can)."""
        group = self.groups.get(group_id)
        if group is None:
            return [] if wanted.empty else [f"group {group_id} is not a consumer-protocol group here (no members)"]
        infos = {}
        for mid, m in group.members.items():
            spec = assignors.MemberSpec(mid, m.instance_id, m.rack_id, frozenset(), group.target_of(mid))
            infos[mid] = steering.MemberInfo(mid, m.instance_id, m.client_host, spec)
        topics = {}
        for pin in wanted.pins:
            if (meta := self.ctx.topic_metadata(pin.topic)) is not None:
                topics[pin.topic] = meta
        return steering.problems(wanted, topics, infos)

    def steering_changed(self, group_id: str) -> CoordinatorResult[None]:
        """The operator changed the group's steering: a new group epoch, so that the next heartbeat
        computes a new target assignment with it."""
        group = self.groups.get(group_id)
        if group is None:
            return CoordinatorResult()
        log.info("[GroupId %s] Steering changed: %s", group_id, self.steering_of(group_id).to_config())
        return CoordinatorResult(new_epoch_records(group, group.group_epoch + 1, group.metadata_hash, self._now()))

    def _assignor_name(self, members: dict[str, ConsumerMember]) -> str:
        """The assignor most members ask for (ties: the broker's order), else the broker's first."""
        known = self.ctx.config.consumer_assignors
        votes: dict[str, int] = {}
        for m in members.values():
            if m.server_assignor in known:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return known[0]
        return max(known, key=lambda n: (votes.get(n, 0), -known.index(n)))

    # -- leaving and fencing --------------------------------------------------------------------
    def _leave(self, req: ConsumerHeartbeatRequest) -> Result:
        group = self._group(req.group_id, False, [])
        response = ConsumerHeartbeatResult(ErrorCode.none, None, req.member_id, req.member_epoch)
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {req.member_id} is not a member of group {group.group_id}.")
            log.info("[GroupId %s] Member %s left the consumer group", group.group_id, req.member_id)
            return self._fenced(group, member, response)
        member = group.static_member(req.instance_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise KafkaError(ErrorCode.fenced_instance_id,
                             f"Static member {req.member_id} with instance id {req.instance_id} was fenced by member "
                             f"{member.member_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # a static member leaves for now: it keeps its place (and target) until its session ends
            log.info("[GroupId %s] Static member %s with instance id %s temporarily left the consumer group",
                     group.group_id, member.member_id, req.instance_id)
            leaving = member.with_subscription(
                member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={},
                assignment_epochs={tp: e for tp, e in member.assignment_epochs.items()
                                   if tp[1] in member.assigned.get(tp[0], ())})
            return CoordinatorResult([current_assignment_record(group.group_id, leaving)], response)
        log.info("[GroupId %s] Static member %s with instance id %s left the consumer group", group.group_id,
                 member.member_id, req.instance_id)
        return self._fenced(group, member, response)

    def _fenced(self, group: ConsumerGroup, member: ConsumerMember, response: T) -> CoordinatorResult[T]:
        """The member leaves or is fenced; the group may become a classic group instead (the
        online downgrade: its state is then applied in memory, the records are not replayed)."""
        if self.on_fence is not None:
            converted = self.on_fence(self, group, member)
            if converted is not None:
                return CoordinatorResult(converted, response, False)
        return CoordinatorResult(self.removal(group, [member]), response)

    def removal(self, group: ConsumerGroup, members: list[ConsumerMember]) -> list[Record]:
        """The members leave: their records tombstoned, the subscription metadata without them,
        one new group epoch."""
        records: list[Record] = []
        gone = {m.member_id for m in members}
        for m in members:
            records += removal_records(group.group_id, m.member_id)
            self._cancel_timers(group.group_id, m.member_id)
        records += self.regexes.removal_records(group, members)
        rest = {mid: m for mid, m in group.members.items() if mid not in gone}
        metadata = self._subscription_metadata(rest, group.resolved_regexes)
        records += new_epoch_records(group, group.group_epoch + 1, self._hash_of(metadata), self._now())
        return records

    def fence(self, group_id: str, member_id: str, reason: str) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return CoordinatorResult()
        log.info("[GroupId %s] Member %s fenced from the group: %s", group_id, member_id, reason)
        return self._fenced(group, member, None)

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self.ctx.timer.cancel(session_key(group_id, member_id))
        self.ctx.timer.cancel(rebalance_key(group_id, member_id))
        self.ctx.timer.cancel(classic_join_key(group_id, member_id))
        self.ctx.timer.cancel(classic_sync_key(group_id, member_id))

    def session_timeout_ms(self, group_id: str) -> int:
        value = self.ctx.group_settings(group_id).get("consumer.session.timeout.ms")
        return int(value) if value is not None else self.ctx.config.consumer_session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.ctx.group_settings(group_id).get("consumer.heartbeat.interval.ms")
        return int(value) if value is not None else self.ctx.config.consumer_heartbeat_interval_ms

    def _schedule_session_timeout(self, group_id: str, member_id: str, timeout_ms: int | None = None) -> None:
        """``timeout_ms``: a classic member's own (from its JoinGroup); else the group's."""
        timeout = self.session_timeout_ms(group_id) if timeout_ms is None else timeout_ms
        self.ctx.timer.schedule(session_key(group_id, member_id), timeout,
                                lambda: self.fence(group_id, member_id, f"no heartbeat in {timeout} ms"))

    def _schedule_rebalance_timeout(self, group_id: str, member_id: str, epoch: int, timeout_ms: int) -> None:
        def expire() -> CoordinatorResult[None]:
            group = self.groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if member is None or member.member_epoch != epoch or member.state is not MemberState.UNREVOKED_PARTITIONS:
                return CoordinatorResult()
            return self.fence(group_id, member_id, f"did not revoke its partitions within {timeout_ms} ms")

        self.ctx.timer.schedule(rebalance_key(group_id, member_id), max(timeout_ms, 0), expire)

    # -- replay ---------------------------------------------------------------------------------
    def _replayed_group(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id, state_since_ms=self._now())
            self.ctx.groups.pop(group_id, None)  # a converted (empty) classic group
        return group

    def replay(self, key: Any, value: Any) -> None:
        gid = key.group
        if isinstance(key, ConsumerGroupMetadataKey):
            if value is None:
                group = self.groups.pop(gid, None)
                if group is not None and group.members:
                    log.warning("[GroupId %s] group tombstone replayed while it has members", gid)
            else:
                group = self._replayed_group(gid)
                group.group_epoch = value.epoch
                group.metadata_hash = value.metadata_hash
                group.creation_time_ms = value.creation_time_ms
        elif isinstance(key, ConsumerGroupPartitionMetadataKey):
            # Kafka 4.0's record (and Gregor's before the hash): its topics name the group's topic
            # ids until the next heartbeat; the next epoch tombstones it
            if value is not None:
                group = self._replayed_group(gid)
                group.has_partition_metadata_record = True
                group.subscription_metadata = {t.topic_name: (t.topic_id, t.num_partitions) for t in value.topics}
            elif gid in self.groups:
                self.groups[gid].has_partition_metadata_record = False
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            if value is None:
                group = self.groups.get(gid)
                if group is not None:
                    group.remove_member(key.member_id)
            else:
                group = self._replayed_group(gid)
                old = group.members.get(key.member_id) or ConsumerMember(key.member_id)
                group.put_member(now_ms=self._now(), member=old.with_subscription(
                    instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
                    client_host=value.client_host, subscribed_topic_names=tuple(value.subscribed_topic_names),
                    subscribed_topic_regex=value.subscribed_topic_regex,
                    rebalance_timeout_ms=value.rebalance_timeout_ms, server_assignor=value.server_assignor,
                    classic=value.classic_member_metadata))
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            if value is None:
                if gid in self.groups:
                    self.groups[gid].target.pop(key.member_id, None)
            else:
                self._replayed_group(gid).target[key.member_id] = {
                    t: frozenset(ps) for t, ps in value.topic_partitions.items() if ps}
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            if value is not None:
                self._replayed_group(gid).assignment_epoch = value.assignment_epoch
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            self._replay_current_assignment(gid, key.member_id, value)
        elif isinstance(key, ConsumerGroupRegularExpressionKey):
            if value is not None:
                self._replayed_group(gid).resolved_regexes[key.regular_expression] = resolved_from(value)
            elif gid in self.groups:
                self.groups[gid].resolved_regexes.pop(key.regular_expression, None)
        group = self.groups.get(gid)
        if group is not None:
            group.note_state(self._now())
        self.ctx.membership_changed()

    def _replay_current_assignment(self, gid: str, member_id: str,
                                   value: ConsumerGroupCurrentMemberAssignmentValue | None) -> None:
        group = self.groups.get(gid) if value is None else self._replayed_group(gid)
        if group is None:
            return
        old = group.members.get(member_id)
        if value is None:
            if old is not None:  # the member no longer holds anything (its removal follows)
                group.put_member(old.with_subscription(member_epoch=LEAVE_EPOCH, previous_member_epoch=LEAVE_EPOCH,
                                                       assigned={}, pending_revocation={}, assignment_epochs={}),
                                 self._now())
            return
        epochs: dict[tuple[TopicId, int], int] = {}
        default = max(value.member_epoch, 0)  # a static member's leave is written at -2
        for parts, given in ((value.assigned_partitions, value.assigned_epochs),
                             (value.partitions_pending_revocation, value.pending_revocation_epochs)):
            for t, ps in parts.items():
                es = (given or {}).get(t)
                if es is not None and len(es) != len(ps):
                    log.error("[GroupId %s] Size of assignment epochs %d is not equal to partitions %d for topic %s "
                              "of member %s: the member epoch is used", gid, len(es), len(ps), t, member_id)
                    es = None
                for i, p_ in enumerate(ps):
                    epochs[(t, p_)] = es[i] if es is not None else default
        group.put_member(now_ms=self._now(), member=(old or ConsumerMember(member_id)).with_subscription(
            member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
            state=_member_state(value.state),
            assigned={t: frozenset(ps) for t, ps in value.assigned_partitions.items() if ps},
            pending_revocation={t: frozenset(ps) for t, ps in value.partitions_pending_revocation.items() if ps},
            assignment_epochs=epochs))

    def on_loaded(self) -> None:
        """Every member of a loaded group gets a fresh session (and rebalance) timeout, as Kafka does;
        then the targets are checked against the groups' steering (``_check_targets_after_load``)."""
        for group in self.groups.values():
            if not group.subscription_metadata:  # derived, not replayed: the topics as they are now
                group.subscription_metadata = self._metadata_of(self._group_topic_names(group))
            for member in group.members.values():
                self._schedule_session_timeout(group.group_id, member.member_id,
                                               member.classic.session_timeout_ms if member.classic else None)
                if member.state is MemberState.UNREVOKED_PARTITIONS and not member.uses_classic_protocol:
                    self._schedule_rebalance_timeout(group.group_id, member.member_id, member.member_epoch,
                                                     member.rebalance_timeout_ms)
        if any(group.members for group in self.groups.values()):
            self.ctx.timer.schedule(TARGETS_CHECK_KEY, 0, self._check_targets_after_load)

    # -- views --------------------------------------------------------------------------------
    def view(self, group: ConsumerGroup) -> ConsumerGroupView:
        """The group as ConsumerGroupDescribe and the CLI show it, with each member's phase."""
        members = []
        for m in group.members.values():
            target = group.target_of(m.member_id)
            pending = {t: sorted(ps - m.assigned.get(t, frozenset())) for t, ps in target.items()}
            reported = group.reported.get(m.member_id)
            unconfirmed = {} if reported is None else {
                t: sorted(ps - reported.get(t, frozenset())) for t, ps in m.assigned.items()}
            state = "Left" if m.member_epoch == STATIC_LEAVE_EPOCH else _STATE_NAMES[m.state]
            members.append(ConsumerMemberView(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                list(m.subscribed_topic_names), m.subscribed_topic_regex, state,
                group.member_since_ms.get(m.member_id, -1), {t: sorted(ps) for t, ps in m.assigned.items()},
                {t: sorted(ps) for t, ps in target.items()},
                {t: sorted(ps) for t, ps in m.pending_revocation.items()},
                {t: ps for t, ps in pending.items() if ps}, {t: ps for t, ps in unconfirmed.items() if ps},
                m.uses_classic_protocol))
        names = {tid: name for name, (tid, _n) in group.subscription_metadata.items()}
        return ConsumerGroupView(group.group_id, group.state.value, group.state_since_ms, group.group_epoch,
                                 group.assignment_epoch, self._assignor_name(group.members), members, names)

    def forget(self, group_id: str) -> None:
        """Drops the group from memory now, with its members' timers (a conversion to a classic
        group, whose records are not replayed; Kafka: removeGroup)."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        for member_id in group.members:
            self._cancel_timers(group_id, member_id)
        self.ctx.membership_changed()

    def delete_group(self, group_id: str) -> list[Record]:
        group = self.groups.get(group_id)
        regexes = self.regexes.removal_records(group, group.members.values()) if group is not None else []
        target, *rest = group_tombstones(group_id)
        return [target, *regexes, *rest]  # Kafka's order: the regexes before the metadata


_STATE_NAMES = {MemberState.STABLE: "Stable", MemberState.UNREVOKED_PARTITIONS: "UnrevokedPartitions",
                MemberState.UNRELEASED_PARTITIONS: "UnreleasedPartitions", MemberState.UNKNOWN: "Unknown"}


def _member_state(value: int) -> MemberState:
    try:
        return MemberState(value)
    except ValueError:
        return MemberState.UNKNOWN


def _check_epoch(member: ConsumerMember, req: ConsumerHeartbeatRequest) -> None:
    """A member's epoch must be the one the coordinator knows; the previous one is accepted when
    the member owns a subset of its assignment (the response that bumped it may have been lost)."""
    if req.member_epoch > member.member_epoch:
        raise KafkaError(ErrorCode.fenced_member_epoch,
                         f"The consumer group member has a greater member epoch ({req.member_epoch}) than the one "
                         f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
                         f"partitions and rejoin.")
    if req.member_epoch < member.member_epoch and (req.member_epoch != member.previous_member_epoch
                                                   or not is_subset(req.owned, member.assigned)):
        raise KafkaError(ErrorCode.fenced_member_epoch,
                         f"The consumer group member has a smaller member epoch ({req.member_epoch}) than the one "
                         f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
                         f"partitions and rejoin.")
