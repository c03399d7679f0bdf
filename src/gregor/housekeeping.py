"""The broker's periodic work, on Kafka's schedules: time-based flushes, recovery-point
checkpoints, retention, compaction, the offset samples behind time lag, and the telemetry topic."""

from __future__ import annotations

import asyncio
import logging

from gregor.config import BrokerConfig
from gregor.log.log_manager import LogManager
from gregor.metrics.registry import BrokerMetrics
from gregor.metrics.telemetry import TelemetryWriter

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 60.0
TICK_S = 0.1


async def run_housekeeping(config: BrokerConfig, logs: LogManager, metrics: BrokerMetrics | None,
                           telemetry: TelemetryWriter | None) -> None:
    """Runs until cancelled. ``metrics`` None: metrics are off, no offsets are sampled;
    ``telemetry`` None: no telemetry is written. ``log.cleaner.backoff.ms`` is read on each round
    (a dynamic config)."""
    loop = asyncio.get_running_loop()
    retention_every = config["log.retention.check.interval.ms"] / 1000
    next_retention = loop.time() + retention_every
    next_checkpoint = loop.time() + CHECKPOINT_INTERVAL_S
    next_clean = loop.time() + config["log.cleaner.backoff.ms"] / 1000
    next_sample = loop.time()
    telemetry_every = config["telemetry.interval.ms"] / 1000
    next_telemetry = loop.time() + telemetry_every
    while True:
        await asyncio.sleep(TICK_S)
        logs.flush_due()
        now = loop.time()
        if metrics is not None and now >= next_sample:
            next_sample = now + 1.0
            metrics.sample_offsets()
        if telemetry is not None and now >= next_telemetry:
            next_telemetry = now + telemetry_every
            try:
                await telemetry.write()
            except Exception:  # noqa: BLE001 - telemetry must never stop the broker
                log.exception("writing consumption telemetry failed")
        if now >= next_retention:
            next_retention = now + retention_every
            logs.enforce_retention()
        if now >= next_clean and config["log.cleaner.enable"]:
            next_clean = now + config["log.cleaner.backoff.ms"] / 1000
            await logs.clean_due()
        if now >= next_checkpoint:
            next_checkpoint = now + CHECKPOINT_INTERVAL_S
            logs.write_checkpoints()
