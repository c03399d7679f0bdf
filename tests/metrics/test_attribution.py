"""Fetch attribution (metrics/attribution.py) over an in-memory view of the coordinator's members:
connections bound to members within the counts membership allows, the evidence that decides
between groups sharing a client id and host, and a property test over random interleavings of
fetches, commits, joins, rebalances and reconnects against the ground truth."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.coordinator.group.api import MemberView
from gregor.metrics.attribution import LEFT_GRACE_S, NO_GROUP, REVISE_EVERY_S, UNOWNED_S, GroupAttribution
from tests.support.consumer_protocol import assignment

_ids = itertools.count()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Members:
    """A MembersView: the members of consumer groups and their committed offsets (committed at
    the clock's time), kept in memory."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.version = 0
        self.members: list[MemberView] = []
        self.clock = clock or Clock()
        self.committed = Commits(self.clock)

    def set(self, *members: MemberView) -> None:
        self.members = list(members)
        self.version += 1

    def membership_version(self) -> int:
        return self.version

    def consumer_members(self) -> Iterable[MemberView]:
        return list(self.members)

    def committed_position(self, group_id: str, topic: str, partition: int) -> tuple[int, int] | None:
        return self.committed.at.get((group_id, topic, partition))


class Commits(dict):
    """group, topic, partition -> committed offset; each commit stamped with the clock's time."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.at: dict[tuple[str, str, int], tuple[int, int]] = {}

    def __setitem__(self, key, offset) -> None:
        super().__setitem__(key, offset)
        self.at[key] = (offset, int(self.clock.now * 1000))


def member(group: str, client_id: str, host: str, partitions: dict[str, list[int]],
           member_id: str | None = None) -> MemberView:
    return MemberView(group, client_id, host, assignment(partitions), member_id or f"{group}-{next(_ids)}")


class Conn:
    """A client connection: its state dict, as the server keeps it."""

    def __init__(self, attribution: GroupAttribution, client_id: str = "rdkafka", host: str = "h") -> None:
        self.attribution = attribution
        self.client_id = client_id
        self.host = host
        self.state: dict = {}

    def fetch(self, reads: dict[tuple[str, int], tuple[int, int]]) -> str:
        """Fetch each partition from an offset, served that many messages: the group it counted for."""
        positions = [(t, p, offset) for (t, p), (offset, _) in reads.items()]
        tally = self.attribution.connection(self.client_id, self.host, self.state)
        group = self.attribution.attribute(tally, positions)
        for (t, p), (offset, messages) in reads.items():
            self.attribution.account(tally, t, p, offset, messages, messages * 10)
        return group

    def close(self) -> None:
        for v in list(self.state.values()):
            v.connection_closed()


def counts(attribution: GroupAttribution, topic: str | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    for (g, t, _p), (m, b) in attribution.consumed().items():
        assert g and b == m * 10
        if topic is None or t == topic:
            out[g] = out.get(g, 0) + m
    return {g: n for g, n in out.items() if n}


def setup(*members: MemberView) -> tuple[Members, Clock, GroupAttribution]:
    view = Members()
    view.set(*members)
    return view, view.clock, GroupAttribution(view, view.clock, view.clock)


def test_a_fetch_belongs_to_the_group_whose_member_owns_the_partition():
    _, _, a = setup(member("billing", "app", "10.0.0.1", {"orders": [0, 1]}),
                    member("audit", "app", "10.0.0.2", {"orders": [0]}))
    assert Conn(a, "app", "10.0.0.1").fetch({("orders", 1): (0, 5)}) == "billing"
    assert Conn(a, "app", "10.0.0.2").fetch({("orders", 0): (0, 4)}) == "audit"
    assert Conn(a, "app", "10.0.0.2").fetch({("orders", 1): (0, 3)}) == NO_GROUP  # not its partition
    assert Conn(a, "other", "10.0.0.1").fetch({("orders", 0): (0, 2)}) == NO_GROUP  # assign mode
    assert counts(a) == {"billing": 5, "audit": 4, NO_GROUP: 5}


def test_two_groups_with_the_default_client_id_each_get_what_they_read():
    """The report: two groups on one host, both `rdkafka`, a new topic, both from offset 0: each
    connection is one member, so each group counts its own reads (before: 6,000 and 0)."""
    _, _, a = setup(member("first", "rdkafka", "h", {"t": [0, 1]}), member("second", "rdkafka", "h", {"t": [0, 1]}))
    c1, c2 = Conn(a), Conn(a)
    pos = {c1: {0: 0, 1: 0}, c2: {0: 0, 1: 0}}
    for _ in range(30):
        for c in (c1, c2):
            reads = {("t", p): (pos[c][p], 50) for p in (0, 1)}
            c.fetch(reads)
            for p in (0, 1):
                pos[c][p] += 50
    assert {c1.fetch({("t", 0): (1500, 0)}), c2.fetch({("t", 0): (1500, 0)})} == {"first", "second"}
    assert counts(a) == {"first": 3000, "second": 3000}


def test_a_member_is_bound_to_one_connection_only():
    """An assign-mode consumer with the same client id and host as a member, reading the member's
    partition: one connection is the member's, the other no group's."""
    _, _, a = setup(member("g", "rdkafka", "h", {"t": [0]}))
    c1, c2 = Conn(a), Conn(a)
    assert c1.fetch({("t", 0): (0, 10)}) == "g"
    assert c2.fetch({("t", 0): (0, 7)}) == NO_GROUP
    assert counts(a) == {"g": 10, NO_GROUP: 7}


def test_commits_show_which_connection_is_which_and_the_counts_move_with_it():
    view, clock, a = setup(member("a-group", "rdkafka", "h", {"t": [0]}),
                           member("b-group", "rdkafka", "h", {"t": [0]}))
    slow, fast = Conn(a), Conn(a)  # the slow one (b-group's) arrives first and gets a-group by name
    assert slow.fetch({("t", 0): (0, 100)}) == "a-group"
    assert fast.fetch({("t", 0): (0, 500)}) == "b-group"
    assert counts(a) == {"a-group": 100, "b-group": 500}
    view.committed[("a-group", "t", 0)] = 500  # a-group committed what only `fast` has fetched
    view.committed[("b-group", "t", 0)] = 100
    clock.now += REVISE_EVERY_S
    assert slow.fetch({("t", 0): (100, 0)}) == "b-group"
    assert fast.fetch({("t", 0): (500, 0)}) == "a-group"
    assert counts(a) == {"a-group": 500, "b-group": 100}
    assert a.corrections == 2


def test_a_consumer_starts_where_its_group_committed():
    view, clock, a = setup(member("a-group", "rdkafka", "h", {"t": [0]}),
                           member("b-group", "rdkafka", "h", {"t": [0]}))
    view.committed[("a-group", "t", 0)] = 40
    view.committed[("b-group", "t", 0)] = 900
    clock.now += 1
    assert Conn(a).fetch({("t", 0): (900, 1000)}) == "b-group"  # even though it read past a-group's 40
    assert Conn(a).fetch({("t", 0): (40, 10)}) == "a-group"


def test_a_binding_stands_while_nothing_tells_the_groups_apart():
    view, clock, a = setup(member("a-group", "rdkafka", "h", {"t": [0]}),
                           member("b-group", "rdkafka", "h", {"t": [0]}))
    c1, c2 = Conn(a), Conn(a)
    first = c1.fetch({("t", 0): (0, 10)})
    second = c2.fetch({("t", 0): (0, 10)})
    for i in range(1, 5):
        clock.now += REVISE_EVERY_S
        view.committed[("a-group", "t", 0)] = view.committed[("b-group", "t", 0)] = 10 * i
        assert c1.fetch({("t", 0): (10 * i, 10)}) == first
        assert c2.fetch({("t", 0): (10 * i, 10)}) == second
    assert a.corrections == 0


def test_a_member_that_leaves_keeps_what_it_read():
    """A consumer leaves its group, then closes its connection: what the connection fetched
    stays its group's, even when another group's member could take the connection."""
    view, clock, a = setup(member("g", "app", "h", {"t": [0]}, "m1"), member("other", "app", "h", {"t": [0]}, "m2"))
    c, d = Conn(a, "app"), Conn(a, "app")
    assert c.fetch({("t", 0): (0, 10)}) == "g"
    assert d.fetch({("t", 0): (0, 4)}) == "other"
    view.committed[("g", "t", 0)] = 10
    view.set(member("other", "app", "h", {"t": [0]}, "m2"))  # g's member left
    clock.now += 1
    assert c.fetch({("t", 0): (10, 0)}) == "g"  # its last fetch, answered
    c.close()
    assert counts(a) == {"g": 10, "other": 4}
    clock.now += LEFT_GRACE_S
    assert d.fetch({("t", 0): (4, 1)}) == "other"
    assert counts(a) == {"g": 10, "other": 5}


def test_a_rebalance_clearing_assignments_does_not_unbind():
    view, _, a = setup(member("g", "app", "h", {"t": [0]}, "m1"))
    c = Conn(a, "app")
    assert c.fetch({("t", 0): (0, 10)}) == "g"
    view.set(member("g", "app", "h", {}, "m1"))  # assignments cleared until the leader's new one
    assert c.fetch({("t", 0): (10, 3)}) == "g"
    view.set(member("g", "app", "h", {"t": [1]}, "m1"))
    assert c.fetch({("t", 1): (0, 4)}) == "g"
    assert counts(a) == {"g": 17}


def test_reads_before_the_group_is_known_here_move_to_it():
    """A broker that follows __consumer_offsets from its leader can serve a new member before it
    knows the generation: those reads go to the group once it is known."""
    view, _, a = setup()
    c = Conn(a, "app")
    assert c.fetch({("t", 0): (0, 10)}) == NO_GROUP
    view.set(member("g", "app", "h", {"t": [0]}))
    assert c.fetch({("t", 0): (10, 5)}) == "g"
    assert counts(a) == {"g": 15}


def test_an_assign_mode_consumer_keeps_its_no_group_count():
    view, clock, a = setup()
    c = Conn(a, "app")
    c.fetch({("t", 0): (0, 10)})
    clock.now += UNOWNED_S
    c.fetch({("t", 0): (10, 5)})
    view.set(member("g", "app", "h", {"t": [0]}))  # a group member with that client id comes later
    assert c.fetch({("t", 0): (15, 1)}) == "g"
    assert counts(a)[NO_GROUP] >= 10  # what it read while no member here could own it stays no group's


def test_a_closed_connection_keeps_its_count_and_frees_its_member():
    view, _, a = setup(member("g", "app", "h", {"t": [0]}))
    old = Conn(a, "app")
    old.fetch({("t", 0): (0, 10)})
    old.close()
    new = Conn(a, "app")  # the consumer reconnected
    assert new.fetch({("t", 0): (10, 5)}) == "g"
    assert counts(a) == {"g": 15}


# -- property: random interleavings against the ground truth -------------------------------------
CLIENT_IDS = ["rdkafka", "app"]
HOSTS = ["h1", "h2"]
PARTITIONS = 3


class World:
    """Groups of client instances, each with one connection to this broker; every instance reads
    from its own position, commits it, and gets new partitions when its group rebalances. The
    ground truth is what each instance read."""

    def __init__(self, groups: int, ids: list[tuple[int, int]]) -> None:
        self.view = Members()
        self.clock = self.view.clock
        self.attribution = GroupAttribution(self.view, self.clock, self.clock)
        self.log_end = 0
        self.truth: dict[str, int] = {}
        self.instances: list[dict] = []
        for g in range(groups):
            client_id, host = CLIENT_IDS[ids[g][0]], HOSTS[ids[g][1]]
            self.instances.append({"group": f"g{g}", "member": f"g{g}-m{next(_ids)}", "client": client_id,
                                   "host": host, "conn": None, "owned": [], "pos": {}})
        for g in range(groups):
            self.rebalance(g, 0)

    def group_members(self, g: int) -> list[dict]:
        return [i for i in self.instances if i["group"] == f"g{g}"]

    def publish(self) -> None:
        self.view.set(*[MemberView(i["group"], i["client"], i["host"], assignment({"t": i["owned"]}), i["member"])
                        for i in self.instances])

    def rebalance(self, g: int, shift: int) -> None:
        members = self.group_members(g)
        for k, inst in enumerate(members):
            inst["owned"] = [p for p in range(PARTITIONS) if (p + shift) % len(members) == k]
        self.publish()

    def join(self, g: int) -> None:
        proto = self.group_members(g)[0]
        self.instances.append({**proto, "member": f"g{g}-m{next(_ids)}", "conn": None, "owned": [], "pos": {}})
        self.rebalance(g, 0)

    def fetch(self, k: int, n: int) -> None:
        inst = self.instances[k % len(self.instances)]
        if not inst["owned"]:
            return
        if inst["conn"] is None:
            inst["conn"] = Conn(self.attribution, inst["client"], inst["host"])
        reads = {}
        for p in inst["owned"]:
            start = inst["pos"].get(p, self.view.committed.get((inst["group"], "t", p), 0))
            got = max(min(n, self.log_end - start), 0)
            reads[("t", p)] = (start, got)
            inst["pos"][p] = start + got
            self.truth[inst["group"]] = self.truth.get(inst["group"], 0) + got
        inst["conn"].fetch(reads)

    def commit(self, k: int) -> None:
        inst = self.instances[k % len(self.instances)]
        for p in inst["owned"]:
            if p in inst["pos"]:
                self.view.committed[(inst["group"], "t", p)] = inst["pos"][p]
        # a partition's position goes with it when the group rebalances
        for p in list(inst["pos"]):
            if p not in inst["owned"]:
                del inst["pos"][p]

    def reconnect(self, k: int) -> None:
        inst = self.instances[k % len(self.instances)]
        if inst["conn"] is not None:
            inst["conn"].close()
            inst["conn"] = None

    def settle(self) -> None:
        """Every instance commits where it is and fetches once more a while later; the counts are
        read a revision after that (a fetch sees a commit only once its consumer fetched again)."""
        for k in range(len(self.instances)):
            self.commit(k)
        self.clock.now += REVISE_EVERY_S
        for k, inst in enumerate(self.instances):
            if inst["conn"] is not None:
                self.fetch(k, 0)
        self.clock.now += REVISE_EVERY_S  # the counts are read a revision later


ACTIONS = st.lists(st.tuples(st.sampled_from(["produce", "fetch", "commit", "rebalance", "join", "reconnect",
                                              "tick"]),
                             st.integers(0, 20), st.integers(1, 40)), min_size=5, max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.integers(2, 5), ids=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=5,
                                               max_size=5),
       actions=ACTIONS)
def test_counts_equal_what_each_group_read(groups, ids, actions):
    """Whatever the interleaving: no empty label, nothing counted twice or lost, and once every
    consumer has committed where it is, each group's count is what its consumers read.

    Instances reconnect only right after committing (a consumer commits on close), so the
    evidence their final count is bound on is there."""
    w = World(groups, ids)
    for action, k, n in actions:
        w.clock.now += 0.01
        if action == "produce":
            w.log_end += n
        elif action == "fetch":
            w.fetch(k, n)
        elif action == "commit":
            w.commit(k)
        elif action == "rebalance":
            g = k % groups
            for inst in w.group_members(g):
                w.commit(w.instances.index(inst))
            w.rebalance(g, n)
            for inst in w.group_members(g):
                w.commit(w.instances.index(inst))
        elif action == "join":
            g = k % groups
            for inst in w.group_members(g):
                w.commit(w.instances.index(inst))
            w.join(g)
        elif action == "reconnect":
            w.commit(k)
            w.clock.now += REVISE_EVERY_S
            w.reconnect(k)
        else:
            w.clock.now += REVISE_EVERY_S
        got = counts(w.attribution, "t")
        assert sum(got.values()) == sum(w.truth.values())
    w.settle()
    assert counts(w.attribution, "t") == {g: n for g, n in w.truth.items() if n}
