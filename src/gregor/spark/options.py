"""Options of the ``gregor`` format, named as in Spark's Kafka source, validated on the driver
before any job starts; every error names the option."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gregor.security.librdkafka import ClientPropertiesError, librdkafka_config

EARLIEST, LATEST = -2, -1
# kafka.isolation.level: Spark's Kafka source leaves it to the Java client, whose default is
# read_uncommitted (librdkafka's is read_committed, so the connector sets it itself)
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class OptionError(ValueError):
    pass


@dataclass
class SourceOptions:
    client: dict[str, str]
    subscribe: list[str] | None = None
    subscribe_pattern: re.Pattern[str] | None = None
    assign: dict[str, list[int]] | None = None
    starting: str | dict[str, dict[str, int]] = "latest"
    ending: str | dict[str, dict[str, int]] = "latest"
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    group_id: str | None = None
    min_partitions: int | None = None
    topic: str | None = None  # default topic for writes
    value_fields: tuple[tuple[str, str], ...] | None = None  # valueFormat=json: rows are the parsed values
    isolation_level: str = "read_uncommitted"  # kafka.isolation.level (also in ``client``)
    extra: dict[str, Any] = field(default_factory=dict)


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise OptionError(f"option {name}: expected true or false, got {value!r}")
    return v == "true"


def _positive_int(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise OptionError(f"option {name}: expected a whole number, got {value!r}") from None
    if n <= 0:
        raise OptionError(f"option {name}: must be positive, got {n}")
    return n


def _offsets(name: str, value: str, allowed: tuple[str, ...]) -> str | dict[str, dict[str, int]]:
    v = value.strip()
    if v.lower() in allowed:
        return v.lower()
    try:
        parsed = json.loads(v)
    except json.JSONDecodeError:
        raise OptionError(f"option {name}: expected {' or '.join(allowed)} or JSON like "
                          f'{{"topic":{{"0":23,"1":-2}}}}, got {value!r}') from None
    if not isinstance(parsed, dict) or not all(isinstance(p, dict) for p in parsed.values()):
        raise OptionError(f'option {name}: JSON must map topics to {{"partition": offset}}')
    out: dict[str, dict[str, int]] = {}
    for topic, parts in parsed.items():
        out[topic] = {}
        for p, off in parts.items():
            if not str(p).isdigit() or not isinstance(off, int) or off < -2:
                raise OptionError(f"option {name}: bad entry {topic}/{p}: {off!r}")
            out[topic][str(int(p))] = off
    return out


KNOWN = ("bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
         "startingTimestamp", "maxOffsetsPerTrigger", "failOnDataLoss", "groupId", "minPartitions", "topic",
         "includeHeaders", "valueFormat", "valueSchema")
VALUE_TYPES = {"long": "long", "bigint": "long", "int": "int", "integer": "int", "double": "double",
               "string": "string", "boolean": "boolean"}


def value_fields(options: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
    """The parsed-value columns when ``valueFormat`` is ``json`` (from the flat DDL in
    ``valueSchema``, e.g. ``"ts long, name string"``); None for Kafka-source rows."""
    opts = {k.lower(): v for k, v in options.items()}
    fmt = opts.get("valueformat", "binary").strip().lower()
    if fmt not in ("binary", "json"):
        raise OptionError(f"option valueFormat: expected binary or json, got {opts['valueformat']!r}")
    if fmt == "binary":
        if "valueschema" in opts:
            raise OptionError("option valueSchema needs valueFormat=json")
        return None
    ddl = opts.get("valueschema", "").strip()
    if not ddl:
        raise OptionError('option valueSchema is required with valueFormat=json, e.g. "ts long, name string"')
    fields = []
    for part in ddl.split(","):
        words = part.split()
        if len(words) != 2 or words[1].lower() not in VALUE_TYPES:
            raise OptionError(f"option valueSchema: expected 'name type' with a type among "
                              f"{', '.join(sorted(VALUE_TYPES))}, got {part.strip()!r}")
        fields.append((words[0].strip("`"), VALUE_TYPES[words[1].lower()]))
    if len({n for n, _t in fields}) != len(fields):
        raise OptionError("option valueSchema: a column name appears twice")
    return tuple(fields)


def _isolation_level(client: dict[str, str]) -> str:
    """``kafka.isolation.level``, checked and written into the client settings: the driver lists
    offsets with it (latest is the last stable offset under read_committed) and the executors'
    consumers read with it. Unset it is read_uncommitted, as in Spark's Kafka source."""
    level = client.get("isolation.level", ISOLATION_LEVELS[0]).strip().lower()
    if level not in ISOLATION_LEVELS:
        raise OptionError(f"option kafka.isolation.level: expected read_uncommitted or read_committed, "
                          f"got {client['isolation.level']!r}")
    client["isolation.level"] = level
    return level


_CANONICAL = {k.lower(): k for k in KNOWN}


def parse_options(options: Mapping[str, str], *, streaming: bool, writing: bool = False) -> SourceOptions:
    # Spark hands options over with lower-cased names; match them case-insensitively, as Spark does
    opts = {_CANONICAL.get(k.lower(), k): v for k, v in options.items() if k.lower() != "path"}
    client: dict[str, str] = {}
    for k, v in opts.items():
        if k.startswith("kafka."):
            client[k[len("kafka."):]] = v
    if "bootstrap.servers" in opts:
        client["bootstrap.servers"] = opts["bootstrap.servers"]
    if not client.get("bootstrap.servers"):
        raise OptionError("option bootstrap.servers (or kafka.bootstrap.servers) is required")
    try:  # Spark's Java-client security options (kafka.sasl.jaas.config, kafka.ssl.truststore.location)
        client = librdkafka_config(client)
    except ClientPropertiesError as e:
        raise OptionError(f"option kafka.*: {e}") from None
    so = SourceOptions(client=client)
    so.topic = opts.get("topic")
    if writing:
        return so
    chosen = [k for k in ("subscribe", "subscribePattern", "assign") if k in opts]
    if len(chosen) != 1:
        raise OptionError("exactly one of the options subscribe, subscribePattern, assign is required"
                          + (f" (got {', '.join(chosen)})" if chosen else ""))
    if "subscribe" in opts:
        so.subscribe = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
        if not so.subscribe:
            raise OptionError("option subscribe: no topic given")
    elif "subscribePattern" in opts:
        try:
            so.subscribe_pattern = re.compile(opts["subscribePattern"])
        except re.error as e:
            raise OptionError(f"option subscribePattern: {e}") from None
    else:
        try:
            a = json.loads(opts["assign"])
            assert isinstance(a, dict) and all(isinstance(v, list) and all(isinstance(p, int) for p in v)
                                               for v in a.values())
        except (json.JSONDecodeError, AssertionError):
            raise OptionError('option assign: expected JSON like {"topic":[0,1]}') from None
        so.assign = a
    so.starting = _offsets("startingOffsets", opts.get("startingOffsets", "latest" if streaming else "earliest"),
                           ("earliest", "latest"))
    if "startingTimestamp" in opts:
        try:
            so.starting_timestamp = int(opts["startingTimestamp"])
        except ValueError:
            raise OptionError(f"option startingTimestamp: expected milliseconds, got {opts['startingTimestamp']!r}") \
                from None
    if "endingOffsets" in opts:
        if streaming:
            raise OptionError("option endingOffsets is for batch queries only")
        so.ending = _offsets("endingOffsets", opts["endingOffsets"], ("latest",))
    if "maxOffsetsPerTrigger" in opts:
        so.max_offsets_per_trigger = _positive_int("maxOffsetsPerTrigger", opts["maxOffsetsPerTrigger"])
    if "minPartitions" in opts:
        so.min_partitions = _positive_int("minPartitions", opts["minPartitions"])
    if "failOnDataLoss" in opts:
        so.fail_on_data_loss = _bool("failOnDataLoss", opts["failOnDataLoss"])
    so.group_id = opts.get("groupId") or None
    so.isolation_level = _isolation_level(client)
    so.value_fields = value_fields(opts)
    unknown = [k for k in opts if k not in KNOWN and not k.startswith("kafka.")]
    if unknown:
        raise OptionError(f"unknown option(s): {', '.join(sorted(unknown))}")
    return so
