"""The stopping broker's side of a controlled shutdown (KafkaServer.controlledShutdown): ask the
controller, again and again, to move the leadership of this broker's partitions away, before the
broker closes its ZooKeeper session (after which the controller would elect new leaders anyway,
but only once the session is gone, and uncleanly for the clients).

Each attempt finds the controller afresh (``/controller``, then its registration), sends
ControlledShutdown v3 and reads the partitions the broker still leads; an attempt fails when there
is no controller, it cannot be reached, it answers an error, or partitions remain. Up to
``controlled.shutdown.max.retries`` attempts, ``controlled.shutdown.retry.backoff.ms`` apart.

When this broker is the controller, it asks its own controller directly, then resigns so that
another broker takes over at once (rather than when this broker's session closes); further
attempts, if any, go to that broker.
"""

from __future__ import annotations

import asyncio
import logging

from gregor.cluster.broker_client import BrokerClient, BrokerUnreachable
from gregor.cluster.controller.controller import Controller
from gregor.cluster.zk import znodes
from gregor.cluster.zk.client import KazooException, ZkClient
from gregor.config import BrokerConfig
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

VERSION = 3


async def request_controlled_shutdown(zk: ZkClient, broker_id: int, broker_epoch: int, config: BrokerConfig,
                                      controller: Controller | None = None) -> bool:
    """True once the controller has moved every leadership of this broker that another replica
    could take; False when the attempts ran out. ``controller``: this broker's own."""
    attempts = int(config["controlled.shutdown.max.retries"])
    backoff = int(config["controlled.shutdown.retry.backoff.ms"]) / 1000
    timeout_ms = int(config["replica.socket.timeout.ms"])
    client: BrokerClient | None = None
    try:
        for attempt in range(1, attempts + 1):
            code: ErrorCode | None = None
            remaining: list[tuple[str, int]] = []
            try:
                target = await _find_controller(zk)
                if target is None:
                    log.info("controlled shutdown: no controller registered in ZooKeeper")
                elif target.broker_id == broker_id and controller is not None and controller.is_active:
                    code, remaining = await controller.controlled_shutdown(broker_id, broker_epoch)
                    # resign either way: another broker takes over now (and, if partitions remain,
                    # the next attempt asks it)
                    await controller.stop()
                    if code == ErrorCode.none and not remaining:
                        log.info("controlled shutdown succeeded (this broker was the controller and resigned)")
                        return True
                else:
                    if client is None or (client.node_id, client.host, client.port) != (
                            target.broker_id, target.host, target.port):
                        if client is not None:
                            await client.close()
                        client = BrokerClient(target.broker_id, target.host, target.port,
                                              client_id=f"broker-{broker_id}-controlled-shutdown",
                                              request_timeout_ms=timeout_ms)
                    response = await client.request(ApiKey.CONTROLLED_SHUTDOWN, VERSION,
                                                    {"broker_id": broker_id, "broker_epoch": broker_epoch})
                    code = ErrorCode(response.error_code)
                    remaining = [(r.topic_name, r.partition_index) for r in response.remaining_partitions]
                    if code == ErrorCode.none and not remaining:
                        log.info("controlled shutdown succeeded (controller: broker %d)", target.broker_id)
                        return True
                if code is not None:
                    log.info("controlled shutdown attempt %d of %d: %s%s", attempt, attempts, code.name,
                             f", still leading {[f'{t}-{p}' for t, p in remaining]}" if remaining else "")
            except (BrokerUnreachable, KazooException, OSError) as e:
                log.warning("controlled shutdown attempt %d of %d failed: %s", attempt, attempts, e)
            if attempt < attempts:
                await asyncio.sleep(backoff)
        return False
    finally:
        if client is not None:
            await client.close()


async def _find_controller(zk: ZkClient) -> znodes.BrokerRegistration | None:
    got = await zk.get(znodes.CONTROLLER)
    if got is None:
        return None
    controller_id = znodes.decode_controller(got[0])
    if controller_id < 0:
        return None
    reg = await zk.get(znodes.broker_path(controller_id))
    if reg is None:
        log.info("controlled shutdown: controller %d has no registration (its session expired?)", controller_id)
        return None
    return znodes.BrokerRegistration.decode(controller_id, reg[0])
