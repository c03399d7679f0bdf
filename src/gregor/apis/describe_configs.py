"""DescribeConfigs (32) for topics, this broker and groups (GROUP resources, Kafka 4.0). Config
sources are Kafka's: a topic override is DYNAMIC_TOPIC_CONFIG, a broker key altered at run time
DYNAMIC_BROKER_CONFIG (resource name = the node id) or DYNAMIC_DEFAULT_BROKER_CONFIG (resource
name ""), a key set in server.properties or --override STATIC_BROKER_CONFIG, a group override
GROUP_CONFIG, the rest DEFAULT_CONFIG. The resource types here serve AlterConfigs and
IncrementalAlterConfigs too (``alter_configs.py``). Which broker keys may change at run time, and
how they persist: ``gregor.cluster.dynamic_configs``."""

from __future__ import annotations

import time
from typing import Any

from gregor.apis.authorization import Op, config_refusal
from gregor.apis.handler import RequestContext, handles
from gregor.cluster.dynamic_configs import SERVED
from gregor.config import KEYS, TOPIC_KEYS, TOPIC_SYNONYMS
from gregor.log.topic_registry import Topic
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

TOPIC, BROKER, GROUP = 2, 4, 32
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 4, 5, 8
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 5, 6, 7

def render(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _type_of(value: Any, key: str) -> int:
    if key == "cleanup.policy" or key == "log.cleanup.policy":
        return TYPE_LIST
    if isinstance(value, bool):
        return TYPE_BOOLEAN
    if isinstance(value, float):
        return TYPE_DOUBLE
    if isinstance(value, int):
        return TYPE_LONG if abs(value) > 2**31 - 1 or key.endswith((".ms", ".bytes")) else TYPE_INT
    return TYPE_STRING


def topic_config_entries(ctx: RequestContext, topic: Topic, keys: list[str] | None,
                         synonyms: bool = False) -> list[dict[str, Any]]:
    effective = ctx.logs.topic_config(topic)
    dyn = ctx.dynamic_configs
    out = []
    for key in sorted(set(TOPIC_KEYS) | set(topic.configs)):
        if keys is not None and key not in keys:
            continue
        value = effective.get(key, topic.configs.get(key))
        broker_key = TOPIC_SYNONYMS.get(key)
        if key in topic.configs:
            source = DYNAMIC_TOPIC_CONFIG
        elif broker_key is not None:
            source = dyn.source_of(broker_key)
        else:
            source = DEFAULT_CONFIG
        syn = []
        if synonyms:
            if key in topic.configs:
                syn.append({"name": key, "value": render(topic.configs[key]), "source": DYNAMIC_TOPIC_CONFIG})
            if broker_key is not None:
                syn += broker_synonyms(ctx, broker_key)
        out.append({"name": key, "value": render(value), "read_only": False, "config_source": source,
                    "is_sensitive": False, "synonyms": syn, "config_type": _type_of(value, key),
                    "documentation": None})
    return out


def broker_synonyms(ctx: RequestContext, key: str) -> list[dict[str, Any]]:
    """A broker key's values in Kafka's order of precedence (include_synonyms)."""
    dyn = ctx.dynamic_configs
    syn = []
    if key in dyn.per_broker:
        syn.append({"name": key, "value": dyn.per_broker[key], "source": DYNAMIC_BROKER_CONFIG})
    if key in dyn.cluster_default:
        syn.append({"name": key, "value": dyn.cluster_default[key], "source": DYNAMIC_DEFAULT_BROKER_CONFIG})
    if key in dyn.static:
        syn.append({"name": key, "value": render(dyn.static[key]), "source": STATIC_BROKER_CONFIG})
    if key in KEYS:
        syn.append({"name": key, "value": render(KEYS[key].default), "source": DEFAULT_CONFIG})
    return syn


def broker_config_entries(ctx: RequestContext, keys: list[str] | None, synonyms: bool = False) -> list[dict[str, Any]]:
    dyn = ctx.dynamic_configs
    out: list[dict[str, Any]] = []
    for key, spec in sorted(KEYS.items()):
        if keys is not None and key not in keys:
            continue
        value = ctx.config[key]
        out.append({"name": key, "value": render(value), "read_only": key not in SERVED,
                    "config_source": dyn.source_of(key), "is_sensitive": False,
                    "synonyms": broker_synonyms(ctx, key) if synonyms else [],
                    "config_type": _type_of(value, key), "documentation": spec.doc})
    for key, value, source in dyn.described_inert(keys):  # accepted at run time, no effect here
        out.append({"name": key, "value": value, "read_only": False, "config_source": source,
                    "is_sensitive": key == "sasl.jaas.config", "synonyms": [], "config_type": TYPE_STRING,
                    "documentation": "accepted for compatibility; no effect on this broker"})
    return sorted(out, key=lambda e: e["name"])


PHASE, HOLDING = "gregor.status.phase", "gregor.status.holding"


def _status_entries(ctx: RequestContext, group_id: str) -> dict[str, str]:
    """Read-only entries the group's coordinator adds for a consumer-protocol group: its phase and
    the members holding it there (what ConsumerGroupDescribe cannot say: partitions still being
    revoked, and since when)."""
    phase = ctx.groups.views.group_phase(group_id)
    if phase is None:
        return {}
    now = time.time()
    since = (f" for {now - phase.since_ms / 1000:.1f} s" if phase.since_ms >= 0 else "")
    holding = "; ".join(f"{member} ({client}) must {why}" + (f" ({now - t / 1000:.1f} s)" if t >= 0 else "")
                        for member, client, why, t in phase.holders)
    return {PHASE: phase.phase + since, HOLDING: holding}


def group_config_entries(ctx: RequestContext, group_id: str, keys: list[str] | None) -> list[dict[str, Any]]:
    values, overrides = ctx.dynamic_configs.group_config(group_id)
    out: list[dict[str, Any]] = []
    if keys is None or PHASE in keys or HOLDING in keys:
        for key, value in _status_entries(ctx, group_id).items():
            if keys is None or key in keys:
                out.append({"name": key, "value": value, "read_only": True, "config_source": DEFAULT_CONFIG,
                            "is_sensitive": False, "synonyms": [], "config_type": TYPE_STRING,
                            "documentation": "the consumer-protocol group's phase, from its coordinator (read only)"})
    for key in sorted(values):
        if keys is not None and key not in keys:
            continue
        value = values[key]
        out.append({"name": key, "value": render(value), "read_only": False,
                    "config_source": GROUP_CONFIG if key in overrides else DEFAULT_CONFIG, "is_sensitive": False,
                    "synonyms": [], "config_type": TYPE_INT if key.endswith(".ms") else TYPE_STRING,
                    "documentation": None})
    return sorted(out, key=lambda e: e["name"])


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    results = []
    for r in req.resources:
        keys = list(r.configuration_keys) if r.configuration_keys is not None else None
        res: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None,
                               "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
        refused = config_refusal(ctx, Op.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
        if refused is not None:
            res["error_code"] = ErrorCode[refused]
            res["error_message"] = "Authorization failed."
        elif r.resource_type == TOPIC:
            topic = ctx.topics.get(r.resource_name)
            if topic is None:
                res["error_code"] = ErrorCode.unknown_topic_or_partition
                res["error_message"] = f"topic '{r.resource_name}' does not exist"
            else:
                res["configs"] = topic_config_entries(ctx, topic, keys, getattr(req, "include_synonyms", False))
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(ctx.cluster.node_id)):
                res["error_code"] = ErrorCode.invalid_request
                res["error_message"] = (f"this is broker {ctx.cluster.node_id}: ask broker {r.resource_name} for its"
                                        " own configs, or name '' for the cluster-wide defaults")
            elif r.resource_name == "":  # the cluster-wide defaults: only what was set dynamically, as Kafka
                res["configs"] = [
                    {"name": k, "value": v, "read_only": False, "config_source": DYNAMIC_DEFAULT_BROKER_CONFIG,
                     "is_sensitive": False, "synonyms": [], "config_type": _type_of(v, k), "documentation": None}
                    for k, v in sorted(ctx.dynamic_configs.cluster_default.items()) if keys is None or k in keys]
            else:
                res["configs"] = broker_config_entries(ctx, keys, getattr(req, "include_synonyms", False))
        elif r.resource_type == GROUP:
            if not r.resource_name:
                res["error_code"] = ErrorCode.invalid_request
                res["error_message"] = "the group id must not be empty"
            else:
                res["configs"] = group_config_entries(ctx, r.resource_name, keys)
        else:
            res["error_code"] = ErrorCode.invalid_request
            res["error_message"] = f"resource type {r.resource_type} is not supported"
        results.append(res)
    return {"throttle_time": 0, "results": results}
