"""The cluster's replica manager without processes (issue 23): roles only for the current
registration, the maximal ISR, a leader epoch change that is not a change of leader, storage
failures, the acks=all wait, the controlled shutdown, DeleteRecords' low watermark."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gregor.protocol.errors import ErrorCode, KafkaError
from tests.support.replica_manager import ME, TOPIC, Harness


def aio(test: Any) -> Any:
    """Run ``test(harness)`` on a fresh event loop, over a harness in the test's tmp_path."""
    def run(tmp_path: Any) -> Any:
        async def body() -> Any:
            h = Harness(tmp_path)
            try:
                return await test(h)
            finally:
                await h.close()
        return asyncio.run(asyncio.wait_for(body(), 30))
    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def deliver_and_refuse(h: Harness):
    """Deliver the state of partition 0: the broker must not lead it (produce is refused)."""
    h.deliver(0)
    part = h.rm.partitions[(TOPIC, 0)]
    assert not part.is_leader and h.leadership == []
    with pytest.raises(KafkaError) as e:
        h.produce()
    assert e.value.code == ErrorCode.not_leader_or_follower
    return part


# -- roles for the current registration (defect 0) -------------------------------------------------
@aio
async def test_no_role_before_the_broker_is_registered(h: Harness) -> None:
    await h.rm.start()  # not registered yet
    h.store.controller_write(0, ME, 3, [1, 2, 3])
    deliver_and_refuse(h)


@aio
async def test_a_leadership_written_before_the_registration_waits_for_the_controller(h: Harness) -> None:
    """A broker restarted within its old session reads a state naming it leader at epoch 3,
    written for its previous registration: it must not act on it (it acknowledged records the
    controller's next leader did not have). It leads once the controller writes the leadership
    again, after the registration."""
    await h.rm.start()
    h.store.controller_write(0, ME, 3, [1, 2, 3])  # written before this registration
    h.rm.set_broker_epoch(h.store.next_zxid())  # registered now
    part = deliver_and_refuse(h)
    h.lead(0, epoch=5)  # the controller confirms it for this registration
    assert part.is_leader and part.leader_epoch == 5 and h.leadership == [(0, 5, True)]


@aio
async def test_a_lost_registration_gives_up_leadership_at_once(h: Harness) -> None:
    await h.start()
    part = h.lead()
    h.rm.set_broker_epoch(-1)  # the session expired: its registration is gone
    assert not part.is_leader and h.leadership[-1] == (0, 1, False)
    h.rm.set_broker_epoch(h.store.next_zxid())  # registered again; the state predates it
    assert not part.is_leader
    h.lead(0, epoch=2)
    assert part.is_leader


# -- a new epoch of the same leader (defect 5) ---------------------------------------------------
@aio
async def test_a_new_epoch_while_leading_is_no_change_of_leadership(h: Harness) -> None:
    await h.start()
    part = h.lead(epoch=1)
    h.store.controller_write(0, ME, 2, [1, 2])  # the controller removed a dead follower: epoch 2
    h.deliver(0)
    assert part.is_leader and part.leader_epoch == 2 and part.isr == [1, 2]
    assert h.leadership == [(0, 1, True)]  # told once: nothing is unloaded and loaded again
    assert part.log.epochs.latest_epoch == 2


# -- the maximal ISR (defect 1) ------------------------------------------------------------------
@aio
async def test_the_high_watermark_waits_for_a_replica_being_added_to_the_isr(h: Harness) -> None:
    await h.start()
    part = h.lead(isr=[1, 2])
    h.rm.follower_fetched(part, 2, 0, 0)
    h.store.held = asyncio.Event()  # the expansion's write is in flight
    h.rm.follower_fetched(part, 3, 0, 0)  # caught up: the leader writes ISR [1, 2, 3]
    await settle()
    assert part.pending_isr == [1, 2, 3] and part.isr == [1, 2]
    res, waiter = h.produce(records=2)
    h.rm.follower_fetched(part, 2, 2, 0)
    # ZooKeeper may already list broker 3: the high watermark may not pass it
    assert part.log.high_watermark == 0
    h.rm.follower_fetched(part, 3, 2, 0)
    assert part.log.high_watermark == 2
    h.store.held.set()
    assert await waiter == ErrorCode.none
    await settle()
    assert part.isr == [1, 2, 3] and part.pending_isr is None


@aio
async def test_an_isr_write_without_an_answer_counts_both_isrs_until_read_back(h: Harness) -> None:
    """The expansion was applied but its answer was lost with the connection: the leader cannot
    tell, so broker 3 holds the high watermark until a read of the state settles it."""
    await h.start()
    part = h.lead(isr=[1, 2])
    h.rm.follower_fetched(part, 2, 0, 0)
    h.store.lost_answer = True
    h.rm.follower_fetched(part, 3, 0, 0)
    await settle()
    assert part.pending_isr == [1, 2, 3] and part.isr_write is None
    h.produce(records=3, acks=1)
    h.rm.follower_fetched(part, 2, 3, 0)
    assert part.log.high_watermark == 0  # broker 3 may be in the ISR
    h.store.lost_answer = False
    h.deliver(0)  # the watch (or the maintenance loop's read) brings the state back
    assert part.isr == [1, 2, 3] and part.pending_isr is None
    h.rm.follower_fetched(part, 3, 3, 0)
    assert part.log.high_watermark == 3


@aio
async def test_a_fenced_isr_write_is_never_taken_as_made(h: Harness) -> None:
    await h.start()
    part = h.lead(isr=[1, 2, 3])
    h.rm.follower_fetched(part, 2, 0, 0)
    h.rm.follower_fetched(part, 3, 0, 0)
    h.store.held = asyncio.Event()
    h.rm._change_isr(part, [1, 2], "test: shrink")
    await settle()
    h.store.controller_write(0, 2, 2, [2, 3])  # meanwhile the controller moved leadership
    h.store.held.set()
    await settle()
    await settle()
    assert not part.is_leader and part.leader == 2 and part.isr == [2, 3]


@aio
async def test_min_insync_counts_the_maximal_isr(h: Harness) -> None:
    await h.start()
    part = h.lead(isr=[1])
    with pytest.raises(KafkaError) as e:
        h.produce()
    assert e.value.code == ErrorCode.not_enough_replicas
    h.store.held = asyncio.Event()
    h.rm.follower_fetched(part, 2, 0, 0)  # the expansion to [1, 2] is in flight
    await settle()
    res, waiter = h.produce(records=1)  # counted: the write waits for broker 2
    h.store.held.set()
    h.rm.follower_fetched(part, 2, 1, 0)
    assert await waiter == ErrorCode.none


@aio
async def test_a_gap_left_by_a_batch_refused_for_want_of_replicas_is_refused_the_same_way(h: Harness) -> None:
    """An idempotent producer's batch is refused NOT_ENOUGH_REPLICAS; a replica rejoins; its next
    batch, already on its way, passes the check one sequence ahead. Kafka would answer
    OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps its epoch for every partition and
    writes again what other partitions' lost answers covered (duplicates, seen in the fault
    tests); it is refused NOT_ENOUGH_REPLICAS like the batch before it, and both then go in, in
    order. A real gap is still OUT_OF_ORDER_SEQUENCE_NUMBER."""
    await h.start()
    part = h.lead(isr=[1, 2])
    _, w = h.produce(records=2, producer=(7, 0, 0))
    h.rm.follower_fetched(part, 2, 2, 0)
    assert await w == ErrorCode.none
    h.store.controller_write(0, 1, 2, [1])  # broker 2 out of the ISR, at a new leader epoch
    h.deliver(0)
    with pytest.raises(KafkaError) as e:
        h.produce(records=2, producer=(7, 0, 2))
    assert e.value.code == ErrorCode.not_enough_replicas
    h.rm.follower_fetched(part, 2, 2, 0)  # broker 2 caught up: back in the (maximal) ISR
    await settle()
    with pytest.raises(KafkaError) as e:
        h.produce(records=2, producer=(7, 0, 4))  # the next batch, sent before the answer
    assert e.value.code == ErrorCode.not_enough_replicas
    res, w = h.produce(records=2, producer=(7, 0, 2))  # resent in order
    res4, w4 = h.produce(records=2, producer=(7, 0, 4))
    assert (res.base_offset, res4.base_offset) == (2, 4)
    h.rm.follower_fetched(part, 2, 6, 0)
    assert await w == await w4 == ErrorCode.none
    with pytest.raises(KafkaError) as e:
        h.produce(records=1, producer=(7, 0, 9))  # a gap of the producer's own
    assert e.value.code == ErrorCode.out_of_order_sequence_number


# -- acks=all -------------------------------------------------------------------------------------
@aio
async def test_acks_all_answers_once_the_isr_has_the_batch(h: Harness) -> None:
    await h.start()
    part = h.lead(isr=[1, 2, 3])
    _, waiter = h.produce(records=2)
    task = asyncio.ensure_future(waiter)
    h.rm.follower_fetched(part, 2, 2, 0)
    await settle()
    assert not task.done()
    h.rm.follower_fetched(part, 3, 2, 0)
    assert await task == ErrorCode.none
    _, lost = h.produce()
    task = asyncio.ensure_future(lost)
    await settle()
    h.store.controller_write(0, 2, 2, [2, 3])
    h.deliver(0)
    assert await task == ErrorCode.not_leader_or_follower


@aio
async def test_acks_all_times_out(h: Harness) -> None:
    await h.start()
    h.lead()
    _, waiter = h.produce(timeout_s=0.05)
    assert await waiter == ErrorCode.request_timed_out


# -- storage failures (defect 2) ----------------------------------------------------------------
@aio
async def test_a_storage_failure_when_becoming_leader_gives_up_the_log_directory(h: Harness) -> None:
    await h.start()
    h.store.controller_write(1, 2, 1, [2, 1])
    h.deliver(1)  # a follower of partition 1
    plog = h.logs.get(TOPIC, 0) or h.logs.create_partition_log(h.registry.get(TOPIC), 0)
    plog.ensure_loaded()

    def full(*_a: Any, **_k: Any) -> None:
        raise OSError(28, "No space left on device")

    plog.epochs.flush = full  # type: ignore[method-assign]
    plog.epochs.dirty = True
    original = plog.epochs.assign
    plog.epochs.assign = lambda e, o, durable=True: (original(e, o, durable=False), full())[0]  # type: ignore
    h.lead(0, epoch=1)
    part = h.rm.partitions[(TOPIC, 0)]
    assert not part.is_leader
    assert h.failures and "No space left" in h.failures[0]
    assert h.leadership == []
    assert not h.rm.fetchers or all(not f.partitions for f in h.rm.fetchers.values())


# -- controlled shutdown (defect 9) -----------------------------------------------------------------
@aio
async def test_a_broker_shutting_down_stops_fetching_what_it_left_the_isr_of(h: Harness) -> None:
    await h.start()
    h.store.controller_write(0, 2, 1, [2, 1, 3])
    h.deliver(0)
    part = h.rm.partitions[(TOPIC, 0)]
    assert h.rm._fetching(part)
    h.rm.begin_controlled_shutdown()
    assert h.rm._fetching(part)  # still in the ISR: fetching on
    h.store.controller_write(0, 2, 2, [2, 3])  # the controlled shutdown took it out
    h.deliver(0)
    assert not h.rm._fetching(part)
    h.store.controller_write(0, 3, 3, [3])  # and whatever happens next, it does not fetch again
    h.deliver(0)
    assert not h.rm._fetching(part)


# -- DeleteRecords --------------------------------------------------------------------------------
@aio
async def test_delete_records_waits_for_every_live_replicas_log_start(h: Harness) -> None:
    await h.start()
    part = h.lead(isr=[1, 2, 3])
    _, waiter = h.produce(records=10, acks=1)
    h.rm.follower_fetched(part, 2, 10, 0)
    h.rm.follower_fetched(part, 3, 10, 0)
    assert part.log.high_watermark == 10
    h.rm.delete_records(TOPIC, 0, 4)
    waiting = asyncio.ensure_future(h.rm.wait_low_watermark(part, 4, 5))
    await settle()
    assert not waiting.done()
    h.rm.follower_fetched(part, 2, 10, 4)
    await settle()
    assert not waiting.done()
    del h.view.live[3]  # a dead replica does not hold it up
    h.rm.follower_fetched(part, 2, 10, 4)
    assert await waiting == 4


@aio
async def test_only_the_leader_deletes_records_and_epochs_are_checked_first(h: Harness) -> None:
    await h.start()
    h.store.controller_write(0, 2, 4, [2, 1])
    h.deliver(0)
    with pytest.raises(KafkaError) as e:
        h.rm.delete_records(TOPIC, 0, 0)
    assert e.value.code == ErrorCode.not_leader_or_follower
    # a follower that asks this replica at a newer epoch than it knows: UNKNOWN_LEADER_EPOCH,
    # which the asker retries at once (this broker has not read its election yet)
    with pytest.raises(KafkaError) as e:
        h.rm.leader_partition(TOPIC, 0, current_leader_epoch=5)
    assert e.value.code == ErrorCode.unknown_leader_epoch
    with pytest.raises(KafkaError) as e:
        h.rm.leader_partition(TOPIC, 0, current_leader_epoch=3)
    assert e.value.code == ErrorCode.fenced_leader_epoch
