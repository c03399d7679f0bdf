"""A share-partition's delivery state (coordinator/share/share_partition.py) with a manual clock:
every transition of KIP-932's record states, the in-flight limit, persistence, and a property
test: under random histories of acquisitions, acknowledgements, releases, rejections, lock
expiries, members leaving and restarts from the persisted state, no record is acknowledged
twice, none is lost, and a record is delivered at most the delivery count limit."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gregor.coordinator.share import share_partition
from gregor.coordinator.share.share_partition import (
    AcknowledgeType,
    Acquired,
    InvalidRecordState,
    RecordState,
    SharePartition,
    StateBatch,
)

ACCEPT, RELEASE, REJECT, RENEW, GAP = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
                                       AcknowledgeType.RENEW, AcknowledgeType.GAP)


def sp(**kw) -> SharePartition:
    return SharePartition(100, record_lock_ms=1000, delivery_count_limit=3, max_in_flight=10, **kw)


def test_acquire_accept_and_the_start_offset_moves():
    p = sp()
    assert p.acquire("a", log_end=105, max_records=10, now_ms=0) == [Acquired(100, 104, 1)]
    assert (p.start_offset, p.end_offset) == (100, 105)
    p.acknowledge("a", [(100, 101, ACCEPT)], now_ms=10)
    assert p.start_offset == 102
    p.acknowledge("a", [(103, 104, ACCEPT)], now_ms=10)
    assert p.start_offset == 102  # 102 still acquired
    p.acknowledge("a", [(102, 102, ACCEPT)], now_ms=10)
    assert (p.start_offset, p.end_offset, p.in_flight) == (105, 105, {})


def test_records_are_shared_between_members_never_given_twice():
    p = sp()
    assert p.acquire("a", 110, 3, 0) == [Acquired(100, 102, 1)]
    assert p.acquire("b", 110, 3, 0) == [Acquired(103, 105, 1)]
    with pytest.raises(InvalidRecordState):
        p.acknowledge("b", [(100, 100, ACCEPT)], 1)  # a's
    assert p.counts()[RecordState.ACQUIRED] == 6


def test_release_redelivers_with_the_count_and_the_limit_archives():
    p = sp()
    p.acquire("a", 101, 10, 0)
    for delivery in (1, 2):
        p.acknowledge("a", [(100, 100, RELEASE)], 0)
        assert p.in_flight[100].state == RecordState.AVAILABLE
        assert p.acquire("a", 101, 10, 0) == [Acquired(100, 100, delivery + 1)]
    p.acknowledge("a", [(100, 100, RELEASE)], 0)  # the third delivery released: the limit (3)
    assert 100 not in p.in_flight and p.start_offset == 101  # ARCHIVED, and the start moved


def test_reject_and_gap_archive():
    p = sp()
    p.acquire("a", 103, 10, 0)
    p.acknowledge("a", [(100, 100, REJECT), (101, 101, GAP)], 0)
    assert p.start_offset == 102


def test_an_expired_lock_makes_the_record_available_and_renew_extends_it():
    p = sp()
    p.acquire("a", 102, 10, now_ms=0)
    p.acknowledge("a", [(101, 101, RENEW)], now_ms=900)
    assert p.expire(1000) == 1  # 100's lock (0 + 1000) expired; 101's now runs to 1900
    assert p.in_flight[100].state == RecordState.AVAILABLE and p.in_flight[101].state == RecordState.ACQUIRED
    with pytest.raises(InvalidRecordState):
        p.acknowledge("a", [(100, 100, ACCEPT)], 1000)  # too late: no longer a's
    assert p.acquire("b", 102, 10, 1000) == [Acquired(100, 100, 2)]


def test_a_member_leaving_releases_its_records():
    p = sp()
    p.acquire("a", 102, 10, 0)
    assert p.release_member("a") == 2
    assert p.acquire("b", 102, 10, 0) == [Acquired(100, 101, 2)]


def test_a_refused_acknowledgement_changes_nothing():
    p = sp()
    p.acquire("a", 103, 10, 0)
    before = {o: (r.state, r.delivery_count) for o, r in p.in_flight.items()}
    for bad in ([(100, 100, ACCEPT), (105, 105, ACCEPT)], [(101, 100, ACCEPT)], [(100, 100, 9)]):
        with pytest.raises(InvalidRecordState):
            p.acknowledge("a", bad, 0)
        assert {o: (r.state, r.delivery_count) for o, r in p.in_flight.items()} == before


def test_the_in_flight_limit():
    p = sp()
    assert p.acquire("a", 1000, 100, 0) == [Acquired(100, 109, 1)]  # max_in_flight=10
    assert p.acquire("b", 1000, 100, 0) == []
    p.acknowledge("a", [(100, 104, ACCEPT)], 0)
    assert p.acquire("b", 1000, 100, 0) == [Acquired(110, 114, 1)]


def test_persisted_state_redelivers_what_was_not_acknowledged():
    p = sp()
    p.acquire("a", 106, 10, 0)
    p.acknowledge("a", [(101, 101, ACCEPT), (102, 102, RELEASE), (103, 103, REJECT)], 0)
    batches = p.state_batches()
    assert batches == [StateBatch(100, 100, RecordState.AVAILABLE, 1),  # acquired: back to available
                       StateBatch(101, 101, RecordState.ACKNOWLEDGED, 1),
                       StateBatch(102, 102, RecordState.AVAILABLE, 1),
                       StateBatch(103, 103, RecordState.ARCHIVED, 1),
                       StateBatch(104, 105, RecordState.AVAILABLE, 1)]
    q = SharePartition.restore(p.start_offset, batches, record_lock_ms=1000, delivery_count_limit=3,
                               max_in_flight=10)
    got = q.acquire("b", 106, 10, 0)
    assert got == [Acquired(100, 100, 2), Acquired(102, 102, 2), Acquired(104, 105, 2)]


# -- the property ---------------------------------------------------------------------------------
ops = st.lists(st.tuples(st.sampled_from(["acquire", "ack", "advance", "leave", "restart", "produce", "copied"]),
                         st.sampled_from(["a", "b", "c"]), st.integers(1, 6),
                         st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW])), max_size=80)


@settings(max_examples=300, deadline=None)
@given(history=ops)
# found by the property: a record acquired for the last allowed time when the leader moved came
# back AVAILABLE and was delivered once more; restored at the limit it is archived
@example(history=[("acquire", "a", 1, ACCEPT), ("leave", "a", 1, ACCEPT), ("acquire", "a", 1, ACCEPT),
                  ("leave", "a", 1, ACCEPT), ("acquire", "a", 1, ACCEPT), ("restart", "a", 1, ACCEPT),
                  ("acquire", "a", 1, ACCEPT)])
def test_random_histories_never_acknowledge_twice_nor_lose_a_record(history):
    run_history(history)


@settings(max_examples=200, deadline=None)
@given(history=ops)
def test_random_histories_with_runs_joined_at_every_step(history):
    """The same property with neighbouring runs joined after every change (the share-partition
    joins them only past COALESCE_ABOVE runs)."""
    saved = share_partition.COALESCE_ABOVE
    share_partition.COALESCE_ABOVE = 0
    try:
        run_history(history)
    finally:
        share_partition.COALESCE_ABOVE = saved


@settings(max_examples=300, deadline=None)
@given(history=ops)
def test_random_histories_with_a_dead_letter_topic(history):
    """With a dead-letter topic (KIP-1191) as well: what is given up is handed to the writer once
    per load, is never delivered again nor accepted, and is archived only when its copy is done."""
    run_history(history, dead_letters=True)


def run_history(history, dead_letters: bool = False) -> None:  # type: ignore[no-untyped-def]
    limit = 3
    p = SharePartition(0, record_lock_ms=50, delivery_count_limit=limit, max_in_flight=8, dead_letters=dead_letters)
    now, log_end = 0, 5
    accepted: set[int] = set()
    held: dict[str, list[int]] = {}
    deliveries: dict[int, int] = {}
    handed: set[int] = set()  # given to the dead-letter writer in this load
    copied: set[int] = set()  # dead-lettered and archived
    pending: list[share_partition.DeadLetter] = []

    def hand_out() -> None:
        for letter in p.dead_letter_work():
            assert dead_letters
            for o in range(letter.first_offset, letter.last_offset + 1):
                assert o not in accepted and o not in handed and o not in copied
                assert p.in_flight[o].state == RecordState.ARCHIVING
                handed.add(o)
            pending.append(letter)

    for op, member, n, kind in history:
        if op == "produce":
            log_end += n
        elif op == "advance":
            now += n * 20
        elif op == "acquire":
            ends = list(range(3, log_end, 3)) + [log_end] if n % 2 else []  # batch-optimised or strict
            for a in p.acquire(member, log_end, n, now, ends):
                for o in range(a.first_offset, a.last_offset + 1):
                    deliveries[o] = a.delivery_count
                    assert a.delivery_count <= limit and o not in accepted and o not in handed and o not in copied
                    held.setdefault(member, []).append(o)
        elif op == "ack" and held.get(member):
            o = held[member].pop(0)
            try:
                p.acknowledge(member, [(o, o, kind)], now)
            except InvalidRecordState:
                continue  # its lock expired meanwhile (or it was handed to someone else)
            if kind == ACCEPT:
                assert o not in accepted
                accepted.add(o)
            elif kind == RENEW:
                held[member].append(o)
        elif op == "leave":
            p.release_member(member)
            held.pop(member, None)
        elif op == "copied" and pending:
            letter = pending.pop(0)
            p.archived(letter.first_offset, letter.last_offset)
            copied.update(range(letter.first_offset, letter.last_offset + 1))
        elif op == "restart":
            p = SharePartition.restore(p.start_offset, p.state_batches(), record_lock_ms=50,
                                       delivery_count_limit=limit, max_in_flight=8, dead_letters=dead_letters)
            held.clear()
            handed.clear()  # what was ARCHIVING is handed out again
            pending.clear()
        hand_out()
        # invariants: every offset below the end is accepted, archived, or still in flight
        assert all(o in p.in_flight or o < p.start_offset for o in range(p.end_offset))
        assert all(p.in_flight[o].state == RecordState.ACKNOWLEDGED for o in accepted if o in p.in_flight)
        assert p.end_offset - p.start_offset <= 8
    # draining: acquire and accept everything left; nothing accepted before comes back
    for _ in range(20):
        now += 1000
        got = p.acquire("z", log_end, 100, now)
        hand_out()
        for letter in pending:
            p.archived(letter.first_offset, letter.last_offset)
        pending.clear()
        for a in got:
            assert not any(o in accepted for o in range(a.first_offset, a.last_offset + 1))
            p.acknowledge("z", [(a.first_offset, a.last_offset, ACCEPT)], now)
            accepted.update(range(a.first_offset, a.last_offset + 1))
    assert p.start_offset == log_end and p.in_flight == {}


def test_with_a_dead_letter_topic_rejected_records_wait_archiving_for_their_copy():
    p = sp(dead_letters=True)
    p.acquire("a", 104, 10, 0)
    p.acknowledge("a", [(100, 101, REJECT), (102, 102, ACCEPT), (103, 103, GAP)], 0)
    assert p.in_flight[100].state == RecordState.ARCHIVING and p.start_offset == 100  # not terminal
    assert p.in_flight[103].state == RecordState.ARCHIVED  # a gap is not a dead letter
    assert p.dead_letter_work() == [share_partition.DeadLetter(100, 101, 1, share_partition.REJECTED)]
    assert p.dead_letter_work() == []  # handed out once
    assert p.acquire("b", 104, 10, 0) == []  # never delivered again
    assert p.archived(100, 101) == 2
    assert (p.start_offset, p.in_flight) == (104, {})


def test_with_a_dead_letter_topic_the_delivery_limit_dead_letters_and_a_restart_hands_out_again():
    p = sp(dead_letters=True)
    p.acquire("a", 101, 10, 0)
    for _ in range(2):
        p.acknowledge("a", [(100, 100, RELEASE)], 0)
        p.acquire("a", 101, 10, 0)
    p.acknowledge("a", [(100, 100, RELEASE)], 0)  # the third delivery released: the limit (3)
    assert p.dead_letter_work() == [share_partition.DeadLetter(100, 100, 3, share_partition.LIMIT_REACHED)]
    batches = p.state_batches()
    assert batches == [StateBatch(100, 100, RecordState.ARCHIVING, 3)]
    q = SharePartition.restore(100, batches, record_lock_ms=1000, delivery_count_limit=3, max_in_flight=10,
                               dead_letters=True)
    assert q.dead_letter_work() == [share_partition.DeadLetter(100, 100, 3, share_partition.LIMIT_REACHED)]
    r = SharePartition.restore(100, batches, record_lock_ms=1000, delivery_count_limit=3, max_in_flight=10)
    assert r.start_offset == 101  # no dead-letter topic any more: archived


def test_records_deleted_from_the_log_leave_the_window():
    p = sp()
    p.acquire("a", 110, 10, 0)
    p.advance_start(105)  # retention deleted 100-104
    assert (p.start_offset, p.end_offset) == (105, 110)
    with pytest.raises(InvalidRecordState):
        p.acknowledge("a", [(102, 102, ACCEPT)], 0)
    p.acknowledge("a", [(105, 109, ACCEPT)], 0)
    assert p.start_offset == 110
    p.advance_start(200)  # past everything: nothing in flight, the next fetch starts there
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (200, 200, 200)


def test_batch_optimised_acquisition_runs_to_the_batch_end_but_not_far_past_the_limit():
    p = SharePartition(0, record_lock_ms=1000, delivery_count_limit=3, max_in_flight=1000)
    ends = [4, 8, 300]  # batches 0-3, 4-7, 8-299
    assert p.acquire("a", 300, 5, 0, ends) == [Acquired(0, 7, 1)]  # the batch the limit falls in, whole
    assert p.acquire("b", 300, 5, 0, ends) == [Acquired(8, 12, 1)]  # 292 more than asked: strict
    assert p.acquire("c", 300, 5, 0) == [Acquired(13, 17, 1)]  # record_limit
