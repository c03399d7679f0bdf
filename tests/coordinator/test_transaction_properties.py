"""Random histories of InitProducerId, AddPartitionsToTxn, EndTxn (V1 and V2, commit and abort,
current and stale epochs), markers completed in any order, the clock running past transaction
timeouts and id expiry, and coordinator reloads. After every step:

- replay equivalence: the shard's state equals that of a shard loaded from the records written
  (but for the last epoch, which Kafka's record does not hold either);
- a transaction ends all or nothing: the partitions of a Prepare record are exactly those the
  transaction had when Ongoing, markers handed over for one producer id and epoch always carry the
  same decision and partitions (also when a reload hands them over again), and a Prepare state
  only completes with its own decision;
- epochs never go backwards for a producer id;
and at the end, once the service has written every marker handed over, no id is left in Prepare*.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.coordinator.transaction.api import TransactionConfig, TxnMarkers
from gregor.coordinator.transaction.metadata import PREPARE_STATES, TxnMetadata
from gregor.protocol.errors import ErrorCode
from gregor.protocol.transaction_log import TxnState
from tests.coordinator.transaction_harness import TxnHarness, persisted

IDS = ["a", "b"]
CONFIG = TransactionConfig(abort_timed_out_transactions_interval_ms=1000, transactional_id_expiration_ms=30_000,
                           remove_expired_transactional_ids_interval_ms=10_000)
COMPLETES = {TxnState.PREPARE_COMMIT: TxnState.COMPLETE_COMMIT, TxnState.PREPARE_ABORT: TxnState.COMPLETE_ABORT}

tid = st.sampled_from(IDS)
init = st.tuples(st.just("init"), tid, st.booleans())
add = st.tuples(st.just("add"), tid, st.sets(st.integers(0, 3), min_size=1, max_size=3), st.booleans())
end = st.tuples(st.just("end"), tid, st.booleans(), st.booleans(), st.sampled_from([False, False, False, True]))
complete = st.tuples(st.just("complete"), st.integers(0, 10))
operation = st.one_of(
    init, add, add, end, end, complete, complete,
    st.tuples(st.just("sleep"), st.sampled_from([100, 1000, 21_000, 40_000])),
    st.tuples(st.just("reload")),
)


class _Recorded(list[TxnMarkers]):
    """The harness's list of markers to write, also remembering every one handed over."""

    def __init__(self, history: list[TxnMarkers]) -> None:
        super().__init__()
        self.history = history

    def append(self, markers: TxnMarkers) -> None:
        self.history.append(markers)
        super().append(markers)


class Checker:
    def __init__(self, h: TxnHarness) -> None:
        self.h = h
        self.clients: dict[str, tuple[int, int]] = {}  # what each id's producer last got
        self.epochs: dict[int, int] = {}  # producer id -> highest epoch seen
        self.seen_markers = 0
        self.handed_over: list[TxnMarkers] = []  # every marker request, in order
        h.markers = _Recorded(self.handed_over)
        h.reload()

    def step(self, op: tuple) -> None:
        h = self.h
        before = dict(h.shard.transactions)
        kind = op[0]
        if kind == "init":
            _, t, expected = op
            r = h.init(t, timeout=20_000, expected=self.clients.get(t) if expected else None)
            if r.error == ErrorCode.none:
                self.clients[t] = (r.producer_id, r.producer_epoch)
        elif kind == "add" and op[1] in self.clients:
            _, t, parts, tv2 = op
            pid, epoch = self.clients[t]
            h.add(t, pid, epoch, [("t", p) for p in sorted(parts)], tv2=tv2)
        elif kind == "end" and op[1] in self.clients:
            _, t, commit, tv2, stale = op
            pid, epoch = self.clients[t]
            r = h.end(t, pid, epoch - 1 if stale else epoch, commit, tv2)
            if r.error == ErrorCode.none and r.producer_id >= 0 and not stale:
                self.clients[t] = (r.producer_id, r.producer_epoch)
        elif kind == "complete" and h.markers:
            h.complete(h.markers.pop(op[1] % len(h.markers)))
        elif kind == "sleep":
            h.sleep(op[1])
        elif kind == "reload":
            h.reload()
        self.check(before)

    def check(self, before: dict[str, TxnMetadata]) -> None:
        h = self.h
        after = h.shard.transactions
        assert persisted(h.load_fresh()) == persisted(h.shard)
        for t, m in after.items():
            old = before.get(t)
            if old is not None and old.producer_id == m.producer_id:
                assert m.producer_epoch >= old.producer_epoch, (old, m)
            assert m.producer_epoch >= self.epochs.get(m.producer_id, -1), (m, self.epochs)
            self.epochs[m.producer_id] = max(self.epochs.get(m.producer_id, -1), m.producer_epoch)
            if old is None or old is m:
                continue
            if m.state in PREPARE_STATES and old.state is TxnState.ONGOING:
                assert m.partitions == old.partitions, (old, m)
            if old.state in PREPARE_STATES:
                assert m.state in (old.state, COMPLETES[old.state]), (old, m)
        for markers in self.handed_over[self.seen_markers:]:
            self.record(markers)
        self.seen_markers = len(self.handed_over)

    def record(self, markers: TxnMarkers) -> None:
        """Markers are handed over for the transaction in Prepare*, with its decision and all its
        partitions (a transaction without partitions needs none)."""
        m = self.h.shard.transactions.get(markers.transactional_id)
        assert m is not None and m.state in PREPARE_STATES, (markers, m)
        assert markers == self.h.shard._markers(m), (markers, m)
        assert markers.commit == (m.state is TxnState.PREPARE_COMMIT) and markers.partitions

    def finish(self) -> None:
        h = self.h
        for _ in range(3):
            while h.markers:
                h.complete(h.markers.pop(0))
            h.reload()  # markers a new coordinator hands over are completed too
        assert not [m for m in h.shard.transactions.values() if m.state in PREPARE_STATES]
        assert h.shard.pending_markers() == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=60))
def test_random_histories(ops):
    h = TxnHarness(CONFIG)
    checker = Checker(h)
    for op in ops:
        checker.step(op)
    checker.finish()


def random_op(rng: random.Random) -> tuple:
    """One step of a seeded history (shaped as the strategy's)."""
    kind = rng.choice(["init", "add", "add", "end", "end", "complete", "complete", "sleep", "reload"])
    t = rng.choice(IDS)
    if kind == "init":
        return ("init", t, rng.random() < 0.5)
    if kind == "add":
        return ("add", t, set(rng.sample(range(4), rng.randint(1, 3))), rng.random() < 0.5)
    if kind == "end":
        return ("end", t, rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.25)
    if kind == "complete":
        return ("complete", rng.randint(0, 10))
    if kind == "sleep":
        return ("sleep", rng.choice([100, 1000, 21_000, 40_000]))
    return ("reload",)


@pytest.mark.parametrize("seed", range(10))
def test_seeded_random_histories(seed):
    """Longer histories than the shrinking search favours: every state, V1 and V2, is reached."""
    rng = random.Random(seed)
    reached: set[tuple[TxnState, int]] = set()
    for _ in range(30):
        h = TxnHarness(CONFIG)
        checker = Checker(h)
        for _ in range(60):
            checker.step(random_op(rng))
            reached |= {(m.state, m.client_version) for m in h.shard.transactions.values()}
        checker.finish()
    assert {s for s, _ in reached} >= {TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_ABORT,
                                       TxnState.COMPLETE_ABORT, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT}
    assert {v for _, v in reached} == {0, 2}
