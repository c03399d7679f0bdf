"""A broker in this process with the transaction coordinator started, for tests that drive
transactions with raw requests (tests/apis, tests/coordinator)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


@contextmanager
def transactional_node(factory: Callable[..., Any], topic_partitions: int = 2,
                       settings: dict[str, str] | None = None) -> Iterator[Any]:
    """Groups and the transaction coordinator started, topic ``t`` created."""
    node = factory(settings)
    node.start_groups()
    node.run(node.broker.transactions.start())
    node.services.topics.create_topic("t", topic_partitions, {})
    try:
        yield node
    finally:
        node.run(node.broker.transactions.stop())


def init_producer(node: Any, transactional_id: str, version: int = 4) -> tuple[int, int]:
    """FindCoordinator (which creates ``__transaction_state``), then InitProducerId: (id, epoch)."""
    assert node.call(ApiKey.FIND_COORDINATOR, 3, {"key": transactional_id, "key_type": 1}).error_code == 0
    node.run(node.broker.transactions.wait_loaded())
    resp = node.call(ApiKey.INIT_PRODUCER_ID, version, {"transactional_id": transactional_id,
                                                        "transaction_timeout": timedelta(seconds=60),
                                                        "producer_id": -1, "producer_epoch": -1})
    assert resp.error_code == ErrorCode.none, resp
    return resp.producer_id, resp.producer_epoch
