"""A log that gives a partition to a member while another still holds it (a defect of the writer,
seen once under broker pauses with a static member replaced) must not make the group's
__consumer_offsets partition unloadable: the later record wins, loudly, and releasing the earlier
holder does not free the partition from the later one."""

from __future__ import annotations

import logging
import uuid

from gregor.coordinator.group.consumer_group import ConsumerGroup, ConsumerMember

T = uuid.UUID(int=7)


def test_a_partition_given_twice_is_replayed_last_writer_wins(caplog):
    g = ConsumerGroup("g")
    g.put_member(ConsumerMember("a", member_epoch=3, assigned={T: frozenset({0, 1})}))
    with caplog.at_level(logging.ERROR, logger="gregor.coordinator"):
        g.put_member(ConsumerMember("b", member_epoch=4, assigned={T: frozenset({1})}))  # must not raise
    assert "still holds it" in caplog.text
    assert g.owner_of(T, 1) == "b" and g.owner_of(T, 0) == "a"
    g.put_member(ConsumerMember("a", member_epoch=5, assigned={T: frozenset({0})}))  # a lets 1 go
    assert g.owner_of(T, 1) == "b"
    g.remove_member("a")
    assert g.owner_of(T, 0) is None and g.owner_of(T, 1) == "b"
