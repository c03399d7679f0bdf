"""Operator steering of a consumer-protocol group's assignment: pins, isolation, freeze.

Steering is carried by Kafka's group-config channel (IncrementalAlterConfigs on the GROUP
resource), in three keys any Kafka admin client can set:

- ``gregor.assignment.pins``: a list of ``TOPIC:PARTITION=MEMBER``, with ``|fallback`` at the end
  when the partition may go to others while its member is away (without it, the partition waits,
  unassigned, for its member to come back);
- ``gregor.assignment.isolated``: a list of MEMBER: they stay in the group and get nothing;
- ``gregor.assignment.frozen``: ``true``: the assignment changes only for members that leave or
  die (their partitions go to the others); a member that joins gets nothing until unfrozen.

MEMBER is ``host:HOST`` (a member on that host, the one with the fewest pins if several), an
instance id (``group.instance.id``) or a member id, tried in that order; ``instance:ID`` and
``member:ID`` say which. The assignor then balances the rest (:func:`steer` builds its
GroupSpec: pins are ``fixed``, counted toward their member's share; waiting pins ``excluded``;
isolated members left out; when frozen, every established member's partitions are ``fixed`` and
new members left out). :func:`problems` lists what is wrong with a steering for a group as it is
(unknown topic, partition out of range, no such member, a pin on an isolated member), so a bad
change is refused and changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from gregor.assignment.assignors import Assignment, GroupSpec, MemberSpec

PINS = "gregor.assignment.pins"
ISOLATED = "gregor.assignment.isolated"
FROZEN = "gregor.assignment.frozen"
KEYS = (PINS, ISOLATED, FROZEN)
LIST_KEYS = (PINS, ISOLATED)
FALLBACK = "|fallback"

TopicMeta = tuple[uuid.UUID, int]  # (topic id, partition count)


class SteeringError(ValueError):
    """A steering value that cannot be read (the message says which and why)."""


@dataclass(frozen=True)
class Selector:
    """Who a pin or an isolation names: ``kind`` host, instance, member, or any (an instance id,
    else a member id)."""

    kind: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Selector:
        text = text.strip()
        kind, sep, value = text.partition(":")
        if sep and kind in ("host", "instance", "member"):
            if not value:
                raise SteeringError(f"{text!r}: nothing after {kind}:")
            return cls(kind, value)
        if not text:
            raise SteeringError("an empty member")
        return cls("any", text)

    def __str__(self) -> str:
        return self.value if self.kind == "any" else f"{self.kind}:{self.value}"


@dataclass(frozen=True)
class Pin:
    topic: str
    partition: int
    member: Selector
    fallback: bool = False

    @classmethod
    def parse(cls, text: str) -> Pin:
        body = text.strip()
        fallback = body.endswith(FALLBACK)
        if fallback:
            body = body[: -len(FALLBACK)]
        where, sep, who = body.partition("=")
        topic, sep2, part = where.rpartition(":")
        if not sep or not sep2 or not topic:
            raise SteeringError(f"{text!r}: a pin is TOPIC:PARTITION=MEMBER")
        try:
            partition = int(part)
        except ValueError:
            raise SteeringError(f"{text!r}: {part!r} is not a partition number") from None
        if partition < 0:
            raise SteeringError(f"{text!r}: partition {partition} is negative")
        return cls(topic, partition, Selector.parse(who), fallback)

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}={self.member}{FALLBACK if self.fallback else ''}"


@dataclass(frozen=True)
class Steering:
    pins: tuple[Pin, ...] = ()
    isolated: tuple[Selector, ...] = ()
    frozen: bool = False

    @classmethod
    def from_config(cls, values: Mapping[str, object]) -> Steering:
        pins = tuple(Pin.parse(p) for p in _items(values.get(PINS)))
        seen: dict[tuple[str, int], Pin] = {}
        for p in pins:
            if (p.topic, p.partition) in seen:
                raise SteeringError(f"{p.topic}:{p.partition} is pinned twice ({seen[(p.topic, p.partition)]}, {p})")
            seen[(p.topic, p.partition)] = p
        isolated = tuple(Selector.parse(s) for s in _items(values.get(ISOLATED)))
        frozen = str(values.get(FROZEN) or "false").strip().lower()
        if frozen not in ("true", "false"):
            raise SteeringError(f"{FROZEN} must be true or false, not {frozen!r}")
        return cls(pins, isolated, frozen == "true")

    def to_config(self) -> dict[str, str]:
        return {PINS: ",".join(map(str, self.pins)), ISOLATED: ",".join(map(str, self.isolated)),
                FROZEN: "true" if self.frozen else "false"}

    @property
    def empty(self) -> bool:
        return not self.pins and not self.isolated and not self.frozen


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations


def apply_operation(current: str, key: str, op: int, value: str | None) -> str:
    """A steering key's value after one IncrementalAlterConfigs operation, as the broker applies
    it and the CLI's dry run predicts it: APPEND to the pins replaces the pins of the same
    partitions, SUBTRACT from them names partitions only (``TOPIC:PARTITION``); the lists keep
    their order without repeats. SteeringError for an operation the key does not take."""
    if op == SET:
        return str(value or "")
    if op == DELETE:
        return ""
    if op not in (APPEND, SUBTRACT):
        raise SteeringError(f"unknown operation {op} for {key}")
    if key not in LIST_KEYS:
        raise SteeringError(f"config {key} is not a list: {'APPEND' if op == APPEND else 'SUBTRACT'} is not allowed")
    old, items = _items(current), _items(value)
    if key == PINS:
        gone = {str(Pin.parse(i)).split("=", 1)[0] if op == APPEND else i.split("=", 1)[0] for i in items}
        old = [i for i in old if i.split("=", 1)[0] not in gone]
        return ",".join(dict.fromkeys(old + items if op == APPEND else old))
    return ",".join(dict.fromkeys(old + items) if op == APPEND else [i for i in old if i not in items])


def _items(value: object) -> list[str]:
    return [i for i in str(value or "").split(",") if i.strip()]


@dataclass(frozen=True)
class MemberInfo:
    """What steering needs to know of a member."""

    member_id: str
    instance_id: str | None
    client_host: str  # "/127.0.0.1" as Kafka shows it, or a bare host
    spec: MemberSpec  # its subscription (topic ids) and current target


@dataclass
class Steered:
    """The assignor's input with the steering applied, and what the report says about it."""

    spec: GroupSpec
    pinned: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)  # partition -> member id
    waiting: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)  # partition -> why it waits
    fell_back: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)  # partition -> the absent member
    isolated: set[str] = field(default_factory=set)  # member ids
    held_back: set[str] = field(default_factory=set)  # member ids that get nothing while frozen
    notes: list[str] = field(default_factory=list)


def _host(h: str) -> str:
    return h.lstrip("/")


def resolve(selector: Selector, members: Mapping[str, MemberInfo], load: Mapping[str, int] | None = None
            ) -> str | None:
    """The member id a selector names now, or None. ``host:`` picks, among the members on that
    host, the one with the least ``load`` (pins so far), then the first by instance or member id."""
    if selector.kind == "host":
        on_host = sorted((m for m in members.values() if _host(m.client_host) == selector.value),
                         key=lambda m: ((load or {}).get(m.member_id, 0), m.instance_id or "", m.member_id))
        return on_host[0].member_id if on_host else None
    if selector.kind in ("instance", "any"):
        for m in members.values():
            if m.instance_id == selector.value:
                return m.member_id
        if selector.kind == "instance":
            return None
    return selector.value if selector.value in members else None


def problems(steering: Steering, topics: Mapping[str, TopicMeta], members: Mapping[str, MemberInfo]) -> list[str]:
    """Why this steering cannot be applied to the group as it is (empty: it can)."""
    out = []
    isolated = {resolve(s, members) for s in steering.isolated}
    for s in steering.isolated:
        if resolve(s, members) is None:
            out.append(f"cannot isolate {s}: no such member in the group")
    for p in steering.pins:
        meta = topics.get(p.topic)
        if meta is None:
            out.append(f"cannot pin {p.topic}:{p.partition}: no topic {p.topic}")
        elif not 0 <= p.partition < meta[1]:
            out.append(f"cannot pin {p.topic}:{p.partition}: {p.topic} has partitions 0-{meta[1] - 1}")
        who = resolve(p.member, members)
        if who is None:
            out.append(f"cannot pin {p.topic}:{p.partition} to {p.member}: no such member in the group")
        elif who in isolated:
            out.append(f"cannot pin {p.topic}:{p.partition} to {p.member}: that member is isolated")
    return out


def steer(spec: GroupSpec, members: Mapping[str, MemberInfo], topics: Mapping[str, TopicMeta],
          steering: Steering) -> Steered:
    """``spec`` (every member, their subscriptions and current targets) with ``steering`` applied:
    pins first, isolations, the freeze; the assignor balances the rest."""
    if steering.empty:
        return Steered(spec)
    out = Steered(spec)
    isolated = {mid for s in steering.isolated if (mid := resolve(s, members)) is not None}
    out.isolated = isolated
    fixed: dict[str, Assignment] = {}
    excluded: set[tuple[uuid.UUID, int]] = set(spec.excluded)
    load: dict[str, int] = {}
    for p in steering.pins:
        meta = topics.get(p.topic)
        if meta is None or not 0 <= p.partition < meta[1]:
            out.notes.append(f"pin {p}: {p.topic}:{p.partition} does not exist (ignored)")
            continue
        tp = (meta[0], p.partition)
        who = resolve(p.member, {m: i for m, i in members.items() if m not in isolated}, load)
        if who is None:
            if p.fallback:
                out.fell_back[tp] = str(p.member)
                out.notes.append(f"{p.topic}-{p.partition}: pinned to {p.member}, which is not in the group: "
                                 "assigned to another member meanwhile (fallback)")
            else:
                excluded.add(tp)
                out.waiting[tp] = f"pinned to {p.member}, which is not in the group"
                out.notes.append(f"{p.topic}-{p.partition}: waits for {p.member} (pinned, not in the group)")
            continue
        load[who] = load.get(who, 0) + 1
        out.pinned[tp] = who
        fixed[who] = {**fixed.get(who, {}), tp[0]: fixed.get(who, {}).get(tp[0], frozenset()) | {tp[1]}}
    pinned_tps = set(out.pinned)
    chosen = {mid: s for mid, s in spec.members.items() if mid not in isolated}
    if steering.frozen:
        established = {mid for mid, s in chosen.items() if any(s.current.values())}
        out.held_back = set(chosen) - established
        for mid in established:
            s = chosen[mid]
            keep = {t: frozenset(p for p in ps if (t, p) not in pinned_tps and (t, p) not in excluded
                                 and t in s.subscribed and p < spec.partitions.get(t, 0))
                    for t, ps in s.current.items()}
            for t, ps in keep.items():
                if ps:
                    fixed.setdefault(mid, {})
                    fixed[mid] = {**fixed[mid], t: fixed[mid].get(t, frozenset()) | ps}
        chosen = {mid: s for mid, s in chosen.items() if mid in established}
        if out.held_back:
            out.notes.append(f"frozen: {len(out.held_back)} member(s) that joined since get nothing until unfrozen")
    for mid in isolated:
        out.notes.append(f"member {mid} is isolated: it stays in the group with nothing assigned")
    out.spec = GroupSpec(chosen, spec.partitions, spec.partition_racks, fixed, frozenset(excluded))
    return out
