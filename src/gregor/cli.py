"""Command line.

- ``gregor serve [server.properties] [--override key=value ...]``: the broker. Exit codes: 0 after
  a clean stop (SIGTERM/SIGINT), 2 for bad arguments or configuration (the message names the key),
  1 for a failure while running.
- ``gregor groups ...``, ``gregor topics ...`` and ``gregor transactions ...``: operator tools over
  the Kafka protocol (they work against any Kafka-compatible cluster). Exit code 1 with a message
  on failure.
- ``gregor lag-report ...``: the Spark job over the telemetry history (see docs/lag-report.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from gregor import __version__
from gregor.admin import acls_cli, groups_cli, topics_cli, transactions_cli, users_cli
from gregor.admin.client import AdminError
from gregor.config import ConfigError
from gregor.lagreport import cli as lag_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gregor", description="Kafka-wire-compatible broker")
    parser.add_argument("--version", action="version", version=f"gregor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the broker (like kafka-server-start.sh)")
    serve.add_argument("properties", nargs="?", type=Path, help="server.properties file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="set a config key (Kafka's names), may be repeated")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.add_argument("--event-loop", default=_default_loop(), choices=["asyncio", "uvloop"],
                       help="event loop implementation (default: uvloop when installed)")
    groups_cli.add_parser(sub)
    topics_cli.add_parser(sub)
    transactions_cli.add_parser(sub)
    acls_cli.add_parser(sub)
    users_cli.add_parser(sub)
    lag_cli.add_parser(sub)
    return parser


def _default_loop() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "lag-report":
        return lag_cli.run(args)
    tool = {"groups": groups_cli, "topics": topics_cli, "transactions": transactions_cli, "acls": acls_cli,
            "users": users_cli}[args.command]
    try:
        return tool.run(args)
    except AdminError as e:
        print(f"gregor {args.command}: {e}", file=sys.stderr)
        return 1


def serve(args: argparse.Namespace) -> int:
    from gregor.broker import Broker
    from gregor.config import BrokerConfig
    from gregor.log.log_manager import DataDirInUse
    from gregor.security.authenticator import SecurityConfigError
    from gregor.server.allocator import tune_allocator

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    try:
        config = BrokerConfig.from_sources(args.properties, args.override)
        config.data_dir  # noqa: B018 - validates log.dirs
        config.listeners()
        check_listener_security(config)
    except (ConfigError, SecurityConfigError) as e:
        print(f"gregor: configuration error: {e}", file=sys.stderr)
        return 2
    for key in config.ignored:
        logging.getLogger("gregor.config").info("ignoring %s: it has no effect on a single Gregor node", key)

    tune_allocator()  # request memory stays with the process between requests (server/allocator.py)

    async def run() -> int:
        broker = Broker(config)
        # SIGTERM/SIGINT from the start: a broker still joining its cluster (ZooKeeper slow or
        # unreachable) stops cleanly too, instead of dying with its ZooKeeper session open
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        starting = loop.create_task(broker.start())
        stopped = loop.create_task(stop.wait())
        await asyncio.wait((starting, stopped), return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            logging.getLogger("gregor").info("stopped while starting")
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
            await broker.stop()
            return 0
        try:
            starting.result()
        except (ConfigError, DataDirInUse) as e:
            print(f"gregor: {e}", file=sys.stderr)
            return 2
        except TimeoutError as e:  # no ZooKeeper server answered (zookeeper.connection.timeout.ms)
            print(f"gregor: {e}", file=sys.stderr)
            broker.logs.shutdown()
            return 2
        except OSError as e:
            print(f"gregor: cannot listen on {config['listeners']}: {e.strerror}", file=sys.stderr)
            broker.logs.shutdown()
            return 2
        print(f"gregor: broker {broker.node_id} ready on port {broker.bound_port}", file=sys.stderr, flush=True)
        await stopped
        logging.getLogger("gregor").info("shutting down")
        await broker.stop()
        return 0

    if args.event_loop == "uvloop":
        import uvloop

        uvloop.install()
    return asyncio.run(run())


def check_listener_security(config: Any) -> None:
    """Build every listener's TLS context and SASL settings once before starting, so that a bad
    key store or JAAS entry is a configuration error, not a failure half-way through the start."""
    import functools

    from gregor.security.authenticator import SecurityConfigError, build_listener_security
    from gregor.security.client import ClientSecurityError, inter_broker_security
    from gregor.security.listeners import listener_setting

    listeners = config.listeners()
    for spec in listeners.bound:
        build_listener_security(spec, functools.partial(listener_setting, config, spec.name), lambda _u, _m: None)
    if config["zookeeper.connect"]:  # a cluster's brokers connect to each other's inter-broker listener
        inter = listeners.named(listeners.inter_broker)
        try:
            inter_broker_security(inter, functools.partial(listener_setting, config, inter.name))
        except ClientSecurityError as e:
            raise SecurityConfigError(str(e)) from None
