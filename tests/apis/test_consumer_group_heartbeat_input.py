"""ConsumerGroupHeartbeat input the coordinator must not see, found by the live fuzz
(tests/integration/test_fuzz_consumer_protocol.py):

- a group id, member id or regex longer than a __consumer_offsets record key can hold (32767
  bytes): the heartbeat was taken, its record could not be encoded, and the write failure unloaded
  and reloaded the whole __consumer_offsets partition (every group in it answered NOT_COORDINATOR
  meanwhile, a traceback in the log). Now the request walk refuses any string over 32767 bytes
  before a handler sees it, as Kafka's readers do (the connection is closed);
- v1 with an empty member id: Kafka requires the member to generate its id from v1 on (KIP-1082,
  INVALID_REQUEST "MemberId can't be empty."); the coordinator made one up."""

from __future__ import annotations

import logging

import pytest

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import RequestDecodeError
from gregor.protocol.errors import ErrorCode

TOPIC = "t"


@pytest.fixture
def node(in_process_broker_factory):
    n = in_process_broker_factory({"offsets.topic.num.partitions": "1"})
    n.start_groups()
    n.services.topics.create_topic(TOPIC, 2, {})
    return n


def heartbeat(node, version: int = 1, **fields):
    body = {"group_id": "g", "member_id": "member-1", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000, "subscribed_topic_names": [TOPIC], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []}
    body.update(fields)
    return node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, body)


@pytest.mark.parametrize("field,name", [("group_id", "GroupId"), ("member_id", "MemberId"),
                                        ("subscribed_topic_regex", "SubscribedTopicRegex")])
@pytest.mark.parametrize("char", ["x", "\u00e9"])  # 1 and 2 bytes in UTF-8
def test_strings_longer_than_a_record_key_are_refused(node, caplog, field, name, char):
    member = heartbeat(node)  # a member of the one __consumer_offsets partition, before and after
    assert member.error_code == ErrorCode.none and member.member_epoch >= 1
    caplog.set_level(logging.INFO)
    long = char * (32768 // len(char.encode()))
    with pytest.raises(RequestDecodeError, match=f"string field {field} had invalid length 32768"):
        heartbeat(node, **{field: long, "member_id": "member-2" if field != "member_id" else long})
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert "reloading" not in caplog.text
    # the partition stayed loaded: the first member goes on with its epoch
    again = heartbeat(node, member_epoch=member.member_epoch, subscribed_topic_names=None)
    assert (again.error_code, again.member_epoch) == (ErrorCode.none, member.member_epoch)


def test_the_longest_key_strings_are_taken(node):
    r = heartbeat(node, group_id="g" * 32767, member_id="m" * 32767)
    assert r.error_code == ErrorCode.none and r.member_id == "m" * 32767


@pytest.mark.parametrize("member_id", ["", "  "])  # blanks are empty, as Kafka's trim()
@pytest.mark.parametrize("epoch", [0, -2])
def test_v1_needs_a_member_id(node, epoch, member_id):
    r = heartbeat(node, member_id=member_id, member_epoch=epoch, instance_id="i")
    assert (r.error_code, r.error_message) == (ErrorCode.invalid_request, "MemberId can't be empty.")


def test_v0_joins_without_a_member_id_and_gets_one(node):
    r = heartbeat(node, version=0, member_id="")
    assert r.error_code == ErrorCode.none and r.member_id
