"""A broker the admin tools can reach without a subprocess: in process, listening on an ephemeral
port, its event loop in a background thread."""

from __future__ import annotations

import pytest


@pytest.fixture
def served_broker(in_process_broker_factory):
    from tests.support.in_process import ServedBroker  # loads the broker: only for the tests that use it

    node = in_process_broker_factory({"offsets.topic.num.partitions": "3"})
    node.start_groups()
    served = ServedBroker(node)
    yield served
    served.stop()
