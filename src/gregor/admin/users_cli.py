"""``gregor users``: SCRAM users (what kafka-configs.sh --entity-type users does with
``SCRAM-SHA-256=[iterations=8192,password=...]``): ``list``, ``add USER --password P
[--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N]``, ``remove USER [--mechanism M]``.
The password is salted and hashed here (PBKDF2, as Kafka's admin client does): only the salted
password travels, in AlterUserScramCredentials; the broker keeps Kafka's stored form."""

from __future__ import annotations

import argparse
import hashlib
import os
from typing import Any

from gregor.admin.client import AdminClient, AdminError
from gregor.admin.output import add_action, add_common_options, admin_client, emit
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
NAMES = {n: name for name, (n, _) in MECHANISMS.items()}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("users", help="SCRAM users: list, add, remove (like kafka-configs.sh --entity-type users)")
    add_common_options(p)
    us = p.add_subparsers(dest="action", required=True)
    add_action(us, "list", "users with SCRAM credentials and their mechanisms")
    a = add_action(us, "add", "add a user's credential (or replace it)")
    a.add_argument("user")
    a.add_argument("--password", required=True)
    a.add_argument("--mechanism", default="SCRAM-SHA-256", choices=sorted(MECHANISMS))
    a.add_argument("--iterations", type=int, default=4096)
    r = add_action(us, "remove", "remove a user's credential")
    r.add_argument("user")
    r.add_argument("--mechanism", default=None, choices=sorted(MECHANISMS), help="default: every one it has")


def run(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    try:
        return {"list": list_users, "add": add, "remove": remove}[args.action](admin, args)
    finally:
        admin.close()


def _described(admin: AdminClient, users: list[str] | None) -> list[Any]:
    resp = admin.bootstrap_call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                                {"users": None if users is None else [{"name": u} for u in users]})
    if resp.error_code:
        raise AdminError(f"DescribeUserScramCredentials: {ErrorCode(resp.error_code).name.upper()}")
    return list(resp.results)


def list_users(admin: AdminClient, args: argparse.Namespace) -> int:
    rows = [{"user": r.user, "mechanisms": ",".join(f"{NAMES.get(c.mechanism, c.mechanism)}(iterations="
                                                   f"{c.iterations})" for c in r.credential_infos)}
            for r in _described(admin, None) if not r.error_code]
    emit(args, rows, ["user", "mechanisms"])
    return 0


def _alter(admin: AdminClient, body: dict[str, Any]) -> None:
    resp = admin.bootstrap_call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
    for r in resp.results:
        if r.error_code:
            raise AdminError(f"{r.user}: {ErrorCode(r.error_code).name.upper()}: {r.error_message or ''}")


def add(admin: AdminClient, args: argparse.Namespace) -> int:
    number, digest = MECHANISMS[args.mechanism]
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac(digest, args.password.encode(), salt, args.iterations)
    _alter(admin, {"deletions": [], "upsertions": [{"name": args.user, "mechanism": number,
                                                    "iterations": args.iterations, "salt": salt,
                                                    "salted_password": salted}]})
    print(f"{args.user}: {args.mechanism} credential set ({args.iterations} iterations)")
    return 0


def remove(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.mechanism:
        mechanisms = [MECHANISMS[args.mechanism][0]]
    else:
        found = [r for r in _described(admin, [args.user]) if not r.error_code]
        mechanisms = [c.mechanism for r in found for c in r.credential_infos]
        if not mechanisms:
            raise AdminError(f"{args.user} has no SCRAM credential")
    _alter(admin, {"deletions": [{"name": args.user, "mechanism": m} for m in mechanisms], "upsertions": []})
    print(f"{args.user}: removed {', '.join(NAMES.get(m, str(m)) for m in mechanisms)}")
    return 0
