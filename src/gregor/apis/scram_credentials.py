"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554, with Kafka's
validation and errors: kafka-configs.sh --alter --entity-type users and the admin clients'
describe/alter_user_scram_credentials.

SASL/SCRAM listeners authenticate with these credentials (security/sasl/scram.py). They are kept
in the form Kafka keeps them (salt, StoredKey, ServerKey, iterations; never the salted password):
on one node in ``<log.dirs>/scram-credentials.json`` (mode 0600, written atomically), in a
cluster in ZooKeeper (cluster/zk/scram_credentials.py).

Alter, as Kafka's controller does: a user may appear once per request (a second deletion or
upsertion of the same user is DUPLICATE_RESOURCE); an empty user name or too few (< 4096) or too
many (> 16384) iterations is UNACCEPTABLE_CREDENTIAL; an unknown mechanism
UNSUPPORTED_SASL_MECHANISM; deleting a credential that does not exist RESOURCE_NOT_FOUND.
Describe: no users (null or empty) lists every user with a credential; an unknown user is
RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE (answered once).
"""

from __future__ import annotations

import base64
import hmac
import logging
from typing import Any

from gregor.apis.authorization import Op, cluster_allowed
from gregor.apis.handler import RequestContext, handles
from gregor.cluster.credentials import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, req: Any) -> dict[str, Any]:
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": "Cluster authorization failed", "results": []}
    store = ctx.services.credentials
    if not req.users:
        names = sorted(u for u, mechs in store.users.items() if mechs)
        counts = {u: 1 for u in names}
    else:
        names, counts = [], {}
        for u in req.users:
            if u.name not in counts:
                names.append(u.name)
            counts[u.name] = counts.get(u.name, 0) + 1
    results = []
    for name in names:
        mechs = store.users.get(name)
        if counts[name] > 1:
            results.append({"user": name, "error_code": ErrorCode.duplicate_resource, "credential_infos": [],
                            "error_message": f"Cannot describe SCRAM credentials for the same user twice in a "
                                             f"single request: {name}"})
        elif not mechs:
            results.append({"user": name, "error_code": ErrorCode.resource_not_found, "credential_infos": [],
                            "error_message": f"Attempt to describe a user credential that does not exist: {name}"})
        else:
            results.append({"user": name, "error_code": ErrorCode.none, "error_message": None,
                            "credential_infos": [{"mechanism": m, "iterations": c["iterations"]}
                                                 for m, c in sorted(mechs.items())]})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": results}


def _check(name: str, mechanism: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISMS:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, req: Any) -> dict[str, Any]:
    if not cluster_allowed(ctx, Op.ALTER):
        return {"throttle_time": 0, "results": [
            {"user": name, "error_code": ErrorCode.cluster_authorization_failed,
             "error_message": "Cluster authorization failed"}
            for name in dict.fromkeys([*(d.name for d in req.deletions), *(u.name for u in req.upsertions)])]}
    store = ctx.services.credentials
    errors: dict[str, tuple[ErrorCode, str]] = {}
    deletions: dict[str, int] = {}
    upsertions: dict[str, Any] = {}
    duplicate = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
    for d in req.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = duplicate
            continue
        err = _check(d.name, d.mechanism)
        if err is None and d.mechanism not in store.users.get(d.name, {}):
            err = ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
        if err is None:
            deletions[d.name] = d.mechanism
        else:
            errors[d.name] = err
    for u in req.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = duplicate
            continue
        err = _check(u.name, u.mechanism)
        if err is None and u.iterations < MIN_ITERATIONS:
            err = ErrorCode.unacceptable_credential, "Too few iterations"
        elif err is None and u.iterations > MAX_ITERATIONS:
            err = ErrorCode.unacceptable_credential, "Too many iterations"
        if err is None:
            upsertions[u.name] = u
        else:
            errors[u.name] = err
    results = []
    if deletions or upsertions:
        users = {name: dict(mechs) for name, mechs in store.users.items()}
        for name, mechanism in deletions.items():
            users[name].pop(mechanism, None)
        for name, u in upsertions.items():
            digest = MECHANISMS[u.mechanism][1]
            salted = bytes(u.salted_password)
            client_key = hmac.new(salted, b"Client Key", digest).digest()
            users.setdefault(name, {})[u.mechanism] = {
                "salt": base64.b64encode(bytes(u.salt)).decode(),
                "stored_key": base64.b64encode(digest(client_key).digest()).decode(),
                "server_key": base64.b64encode(hmac.new(salted, b"Server Key", digest).digest()).decode(),
                "iterations": u.iterations,
            }
        try:
            await store.save(users)
        except OSError as e:
            log.error("cannot save %s: %s", store.path, e)
            for name in (*deletions, *upsertions):
                errors[name] = ErrorCode.kafka_storage_error, f"cannot save the credentials: {e.strerror}"
            deletions, upsertions = {}, {}
        if upsertions:
            log.info("SCRAM credentials stored for %s", sorted(upsertions))
    for name in (*deletions, *upsertions):
        results.append({"user": name, "error_code": ErrorCode.none, "error_message": None})
    for name, (code, message) in errors.items():
        results.append({"user": name, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "results": results}
