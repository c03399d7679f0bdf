"""Tables for people, JSON for scripts."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_common_options(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """--bootstrap-server and --json, on the tool and again on each of its actions, so that they
    may stand anywhere on the line, as with Kafka's scripts (``gregor groups describe billing
    --bootstrap-server host:9092 --json``). On an action they default to SUPPRESS, so a value
    given before the action's name is kept."""
    p.add_argument("--bootstrap-server", default=argparse.SUPPRESS if suppress else "127.0.0.1:9092",
                   metavar="HOST:PORT", help="a broker to bootstrap from (default 127.0.0.1:9092)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help="machine-readable output")
    p.add_argument("--command-config", default=argparse.SUPPRESS if suppress else None, metavar="FILE",
                   help="client properties for the connection, as Kafka's tools take them (security.protocol, "
                        "sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ...)")


def admin_client(args: argparse.Namespace) -> Any:
    """The tool's AdminClient: --bootstrap-server, with --command-config's security."""
    from gregor.admin.client import AdminClient, AdminError
    from gregor.config import ConfigError, read_properties
    from gregor.security.client import ClientSecurityError, client_security_from_properties

    security = None
    path = getattr(args, "command_config", None)
    if path:
        from pathlib import Path

        try:
            security = client_security_from_properties(read_properties(Path(path)))
        except (ConfigError, ClientSecurityError) as e:
            raise AdminError(f"--command-config {path}: {e}") from None
    return AdminClient(args.bootstrap_server, security=security)


def add_action(subparsers: Any, name: str, help_: str) -> argparse.ArgumentParser:
    """A sub-command that takes the tool's options after its name too (``gregor groups list --json``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(name, help=help_)
    add_common_options(p, suppress=True)
    return p


def emit(args: argparse.Namespace, data: Any, columns: list[str]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
        return
    rows = data if isinstance(data, list) else [data]
    if not rows:
        print("(none)")
        return
    cells = [[("-" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    print("\n".join(format_table([c.upper() for c in columns], cells)))


def format_table(header: list[str], cells: list[list[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, the header first."""
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(header)]
    return ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in [header, *cells]]
