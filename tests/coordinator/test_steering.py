"""Operator steering of consumer-protocol groups (gregor.assignment.* group configs) on a shard,
without network: pins (to an instance, a member, a host), waiting and fallback pins, isolation,
freeze; and the reconciliation invariant under random steering changes."""

from __future__ import annotations

import random

import pytest

from gregor.assignment import steering
from gregor.assignment.steering import Pin, Selector, Steering, SteeringError
from tests.coordinator.consumer_clients import TOPICS, Client, ConsumerHarness, assert_disjoint, converge

FOO, _ = TOPICS["foo"]
BAR, _ = TOPICS["bar"]


class Steered(ConsumerHarness):
    def __init__(self, **kw) -> None:
        self.settings: dict[str, str] = {}
        super().__init__(**kw)

    def _collaborators(self):
        from dataclasses import replace

        return replace(super()._collaborators(), group_settings=lambda group_id: self.settings)

    def steer(self, strict: bool = True, **values: str) -> bool:
        """Set the group's steering as IncrementalAlterConfigs does, then bump its epoch; a steering
        that does not fit the group is refused and changes nothing."""
        new = {**self.settings, **values}
        problems = self.shard.consumer_mgr.steering_problems("g", Steering.from_config(new))
        if problems:
            assert not strict, problems
            return False
        self.settings = new
        self.run(self.shard.steering_changed("g"))
        return True


def test_parse_and_format():
    s = Steering.from_config({steering.PINS: "orders:7=host:cache-1,orders:8=inst-a|fallback",
                              steering.ISOLATED: "member:abc", steering.FROZEN: "true"})
    assert s.pins == (Pin("orders", 7, Selector("host", "cache-1")), Pin("orders", 8, Selector("any", "inst-a"), True))
    assert s.isolated == (Selector("member", "abc"),) and s.frozen
    assert Steering.from_config(s.to_config()) == s
    for bad in ("orders=x", "orders:x=a", "orders:-1=a", "orders:1=", "orders:1=host:"):
        with pytest.raises(SteeringError):
            Steering.from_config({steering.PINS: bad})
    with pytest.raises(SteeringError, match="pinned twice"):
        Steering.from_config({steering.PINS: "t:1=a,t:1=b"})
    with pytest.raises(SteeringError, match="true or false"):
        Steering.from_config({steering.FROZEN: "yes"})


def test_pin_to_a_static_member_and_to_a_host():
    h = Steered()
    a, b, c = Client(h, ["foo"], instance="cache-a"), Client(h, ["foo"]), Client(h, ["foo"])
    converge([a, b, c])
    h.steer(**{steering.PINS: "foo:0=cache-a,foo:1=cache-a,foo:5=host:127.0.0.1"})
    converge([a, b, c])
    assert {(FOO, 0), (FOO, 1)} <= a.partitions()
    assert sum(len(x.partitions()) for x in (a, b, c)) == 6 and all(len(x.partitions()) == 2 for x in (a, b, c))
    owner = [x for x in (a, b, c) if (FOO, 5) in x.partitions()]
    assert len(owner) == 1  # the host pin went to one member on that host


def test_a_pin_waits_for_its_member_or_falls_back():
    h = Steered()
    a, b = Client(h, ["foo"], instance="i-a"), Client(h, ["foo"], instance="i-b")
    converge([a, b])
    h.steer(**{steering.PINS: "foo:0=i-a,foo:1=i-a|fallback"})
    converge([a, b])
    assert {(FOO, 0), (FOO, 1)} <= a.partitions()
    a.leave()
    converge([b])
    assert (FOO, 0) not in b.partitions() and (FOO, 1) in b.partitions()  # 0 waits, 1 falls back
    assert len(b.partitions()) == 5
    view = h.shard.consumer_group_view("g")
    assert h.group().steered.waiting == {(FOO, 0): "pinned to i-a, which is not in the group"}
    assert view.state == "Stable"
    back = Client(h, ["foo"], instance="i-a")
    converge([back, b])
    assert {(FOO, 0), (FOO, 1)} <= back.partitions()


def test_the_steering_as_metrics_read_it():
    """What the metrics say of a steered group (shard.steerings): pins held, waiting and fallen
    back, isolated members, the freeze and the members it holds back; nothing for a group without
    steering."""
    from gregor.coordinator.group.api import GroupSteering

    h = Steered()
    a, b, c = Client(h, ["foo"], instance="i-a"), Client(h, ["foo"], instance="i-b"), Client(h, ["foo"])
    converge([a, b, c])
    assert list(h.shard.steerings()) == []
    h.steer(**{steering.PINS: "foo:0=i-a,foo:1=i-a|fallback,foo:2=i-b", steering.ISOLATED: f"member:{c.member_id}"})
    converge([a, b, c])
    assert list(h.shard.steerings()) == [GroupSteering("g", False, 3, 0, 0, 1, 0)]
    h.steer(**{steering.FROZEN: "true"})
    d = Client(h, ["foo"])
    converge([a, b, c, d])
    assert list(h.shard.steerings()) == [GroupSteering("g", True, 3, 0, 0, 1, 1)]
    a.leave()
    converge([b, c, d])
    assert list(h.shard.steerings()) == [GroupSteering("g", True, 1, 1, 1, 1, 1)]
    h.steer(**{steering.PINS: "", steering.ISOLATED: "", steering.FROZEN: "false"})
    converge([b, c, d])
    assert list(h.shard.steerings()) == []


def test_isolate_keeps_the_member_with_nothing_and_release_gives_back():
    h = Steered()
    cs = [Client(h, ["foo", "bar"]) for _ in range(3)]
    converge(cs)
    sick = cs[1]
    h.steer(**{steering.ISOLATED: f"member:{sick.member_id}"})
    converge(cs)
    assert sick.partitions() == set() and sick.member_id in h.group().members
    assert len(cs[0].partitions()) + len(cs[2].partitions()) == 9
    h.steer(**{steering.ISOLATED: ""})
    converge(cs)
    assert all(len(c.partitions()) == 3 for c in cs)


def test_frozen_group_changes_only_for_members_that_leave():
    h = Steered()
    a, b, c = (Client(h, ["foo"]) for _ in range(3))
    converge([a, b, c])
    before = {x.member_id: x.partitions() for x in (a, b)}
    h.steer(**{steering.FROZEN: "true"})
    d = Client(h, ["foo"])
    converge([a, b, c, d])
    assert d.partitions() == set()  # joined while frozen: nothing
    c.leave()
    converge([a, b, d])
    for x in (a, b):
        assert before[x.member_id] <= x.partitions()  # kept everything, took over c's
    assert a.partitions() | b.partitions() == {(FOO, p) for p in range(6)} and d.partitions() == set()
    h.steer(**{steering.FROZEN: "false"})
    converge([a, b, d])
    assert all(len(x.partitions()) == 2 for x in (a, b, d))


def test_bad_steering_is_refused_with_reasons():
    h = Steered()
    a = Client(h, ["foo"], instance="i-a")
    a.beat()
    problems = h.shard.consumer_mgr.steering_problems("g", Steering.from_config({
        steering.PINS: "foo:6=i-a,nope:0=i-a,foo:1=ghost", steering.ISOLATED: "member:nobody"}))
    assert problems == ["cannot isolate member:nobody: no such member in the group",
                        "cannot pin foo:6: foo has partitions 0-5", "cannot pin nope:0: no topic nope",
                        "cannot pin foo:1 to ghost: no such member in the group"]
    assert h.shard.consumer_mgr.steering_problems("g", Steering.from_config({
        steering.PINS: "foo:1=i-a", steering.ISOLATED: "i-a"})) == [
        "cannot pin foo:1 to i-a: that member is isolated"]


def test_steering_survives_a_reload():
    h = Steered()
    a, b = Client(h, ["foo"], instance="i-a"), Client(h, ["foo"])
    converge([a, b])
    h.steer(**{steering.PINS: "foo:0=i-a,foo:2=i-a,foo:4=i-a"})
    converge([a, b])
    mine = a.partitions()
    h.reload()
    converge([a, b])
    assert a.partitions() == mine and {(FOO, 0), (FOO, 2), (FOO, 4)} <= mine


@pytest.mark.parametrize("seed", range(12))
def test_random_steering_never_gives_a_partition_to_two_members(seed):
    rng = random.Random(seed)
    h = Steered()
    clients = [Client(h, rng.choice([["foo"], ["foo", "bar"]]), instance=f"i{i}") for i in range(4)]
    for c in clients:
        c.beat()
    for _ in range(40):
        op = rng.random()
        present = [c for c in clients if c.epoch > 0]
        if op < 0.3 and present:
            pins = {f"foo:{p}": rng.choice(present).instance for p in rng.sample(range(6), rng.randint(0, 3))}
            value = ",".join(f"{k}={v}{'|fallback' if rng.random() < 0.5 else ''}" for k, v in pins.items())
            h.steer(False, **{steering.PINS: value})
        elif op < 0.4 and present:
            h.steer(False, **{steering.ISOLATED: rng.choice(["", rng.choice(present).instance])})
        elif op < 0.5:
            h.steer(False, **{steering.FROZEN: rng.choice(["true", "false"])})
        elif op < 0.6 and present:
            rng.choice(present).leave()
        for c in rng.sample(clients, len(clients)):
            c.beat()
            assert_disjoint(clients)
    h.settings = {**h.settings, steering.FROZEN: "false", steering.ISOLATED: ""}
    h.run(h.shard.steering_changed("g"))
    for c in clients:
        c.beat()
    converge(clients, rounds=40)
    s = Steering.from_config(h.settings)
    waiting = {(FOO, p.partition) for p in s.pins if not p.fallback
               and not any(c.instance == p.member.value and c.epoch > 0 for c in clients)}
    wanted = {(TOPICS[t][0], p) for c in clients for t in c.topics for p in range(TOPICS[t][1])}
    owned = set().union(*(c.partitions() for c in clients))
    assert owned == wanted - waiting


def test_operations_on_the_steering_keys():
    """One function applies IncrementalAlterConfigs operations for the broker and the CLI's dry run."""
    op = steering.apply_operation
    pins = op("t:1=a,t:2=b", steering.PINS, steering.APPEND, "t:1=c|fallback,t:3=a")
    assert pins == "t:2=b,t:1=c|fallback,t:3=a"  # a new pin of a partition replaces its old one
    assert op(pins, steering.PINS, steering.SUBTRACT, "t:1,t:3") == "t:2=b"
    assert op("a,b", steering.ISOLATED, steering.APPEND, "b,c") == "a,b,c"
    assert op("a,b", steering.ISOLATED, steering.SUBTRACT, "a") == "b"
    assert op("x", steering.FROZEN, steering.SET, "true") == "true"
    assert op("true", steering.FROZEN, steering.DELETE, None) == ""
    with pytest.raises(SteeringError, match="not a list"):
        op("false", steering.FROZEN, steering.APPEND, "true")
    with pytest.raises(SteeringError):
        op("", steering.PINS, steering.APPEND, "t=a")


def test_a_steering_change_whose_epoch_bump_was_lost_is_applied_after_a_load():
    """The coordinator lost the partition (or restarted) after the steering changed but before it
    wrote the epoch bump: the broker that loads the group finds the target off its steering and
    bumps the epoch itself; a group whose target follows its steering is left as it is."""
    h = Steered()
    a, b = Client(h, ["foo"], instance="i-a"), Client(h, ["foo"], instance="i-b")
    converge([a, b])
    h.reload()
    assert h.sleep(0) == []  # nothing changed: no new epoch
    epoch = h.group().group_epoch
    h.settings = {steering.ISOLATED: "i-b"}  # mirrored from ZooKeeper; the old coordinator's bump never written
    h.reload()
    bumped = h.sleep(0)
    assert [type(k).__name__ for k, _v in bumped] == ["ConsumerGroupMetadataKey"]
    assert h.group().group_epoch == epoch + 1
    converge([a, b])
    assert b.partitions() == set() and len(a.partitions()) == TOPICS["foo"][1]
    assert_disjoint([a, b])
    h.reload()
    assert h.sleep(0) == []
