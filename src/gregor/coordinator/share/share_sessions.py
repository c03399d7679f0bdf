"""Share sessions (KIP-932): per (group, member), the partitions a share consumer fetches from
this broker and the epoch of its next request, as Kafka's ShareSessionCache.

A ShareFetch at epoch 0 opens a session with the partitions it names (replacing one the member
had); later requests must carry the session's next epoch (INVALID_SHARE_SESSION_EPOCH otherwise,
SHARE_SESSION_NOT_FOUND without a session), may add partitions and forget some; epoch -1 closes
it (the caller then releases what the member still holds). At most ``max_sessions`` sessions
(group.share.max.share.sessions): one more is SHARE_SESSION_LIMIT_REACHED."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gregor.protocol.errors import ErrorCode, KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

Partition = tuple[str, int, object]  # topic name, partition, topic id


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass
class ShareSession:
    group: str
    member: str
    epoch: int
    partitions: dict[tuple[str, int], object] = field(default_factory=dict)  # (topic, partition) -> topic id
    connection: object = None


class ShareSessions:
    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def begin(self, group: str, member: str, epoch: int, added: Sequence[Partition],
              forgotten: Sequence[tuple[str, int]],
              connection: object = None) -> ShareSession:
        """The session a request at ``epoch`` works in, with its partitions updated; the epoch
        is moved on (or the session removed, for FINAL_EPOCH) by ``finish``."""
        key = (group, member)
        if epoch == INITIAL_EPOCH:
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                raise KafkaError(ErrorCode.share_session_limit_reached,
                                 f"this broker holds {self.max_sessions} share sessions "
                                 f"(group.share.max.share.sessions)")
            session = self.sessions[key] = ShareSession(group, member, INITIAL_EPOCH, connection=connection)
        else:
            found = self.sessions.get(key)
            if found is None:
                raise KafkaError(ErrorCode.share_session_not_found,
                                 f"member {member} of share group {group} has no share session here")
            session = found
            if epoch != FINAL_EPOCH and epoch != session.epoch:
                raise KafkaError(ErrorCode.invalid_share_session_epoch,
                                 f"share session epoch {epoch}, expected {session.epoch}")
        for topic, partition, topic_id in added:
            session.partitions[(topic, partition)] = topic_id
        for tp in forgotten:
            session.partitions.pop(tp, None)
        return session

    def finish(self, session: ShareSession, epoch: int) -> bool:
        """After the request: the next epoch, or the session closed (True) at FINAL_EPOCH."""
        if epoch == FINAL_EPOCH:
            self.sessions.pop((session.group, session.member), None)
            return True
        session.epoch = next_epoch(epoch)
        return False

    def of_connection(self, connection: object) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.connection is connection]

    def remove(self, session: ShareSession) -> None:
        if self.sessions.get((session.group, session.member)) is session:
            del self.sessions[(session.group, session.member)]

    def members_of(self, group: str) -> int:
        """How many members of ``group`` have a share session here."""
        return len({s.member for s in self.sessions.values() if s.group == group})
