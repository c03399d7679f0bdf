"""ControlledShutdown (7) on a broker that is not the controller: a single node has none."""

from __future__ import annotations

from gregor.apis import REGISTRY
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


def test_single_node_answers_not_controller(in_process_broker):
    resp = in_process_broker.call(ApiKey.CONTROLLED_SHUTDOWN, 3, {"broker_id": 0, "broker_epoch": 5})
    assert resp.error_code == ErrorCode.not_controller and resp.remaining_partitions == ()


def test_advertised_as_v3_only():
    reg = REGISTRY[ApiKey.CONTROLLED_SHUTDOWN]
    assert (reg.min_version, reg.max_version) == (3, 3)
