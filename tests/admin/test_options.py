"""The operator tools' command lines (cli.py, admin/output.py): the tool's options stand anywhere
on the line, as with Kafka's scripts; each action's own arguments and their checks."""

from __future__ import annotations

import pytest

from gregor.cli import build_parser, main
from tests.support.broker_process import free_port


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv", [
    ["groups", "describe", "billing", "--bootstrap-server", "h:1", "--json"],
    ["groups", "describe", "--json", "billing", "--bootstrap-server", "h:1"],
    ["groups", "--bootstrap-server", "h:1", "describe", "billing", "--json"],
    ["groups", "--json", "--bootstrap-server", "h:1", "describe", "billing"],
])
def test_tool_options_before_or_after_the_action(argv):
    args = parse(*argv)
    assert (args.command, args.action, args.group, args.bootstrap_server, args.json) == (
        "groups", "describe", "billing", "h:1", True)


def test_defaults_and_the_last_value_wins():
    args = parse("topics", "list")
    assert (args.bootstrap_server, args.json, args.exclude_internal) == ("127.0.0.1:9092", False, False)
    args = parse("topics", "--bootstrap-server", "a:1", "list", "--bootstrap-server", "b:2")
    assert args.bootstrap_server == "b:2"


def test_topic_create_arguments():
    args = parse("topics", "create", "t", "--partitions", "3", "--config", "retention.ms=1", "--config",
                 "cleanup.policy=compact")
    assert (args.topic, args.partitions, args.replication_factor, args.config) == (
        "t", 3, -1, ["retention.ms=1", "cleanup.policy=compact"])
    assert parse("topics", "create", "t").partitions == -1  # the broker's num.partitions


def test_reset_offsets_arguments():
    args = parse("groups", "reset-offsets", "g", "--topic", "a", "--topic", "b:0,1", "--shift-by", "-5")
    assert (args.topic, args.shift_by, args.to_offset, args.execute, args.dry_run) == (
        ["a", "b:0,1"], -5, None, False, False)
    args = parse("groups", "reset-offsets", "g", "--topic", "a", "--to-datetime", "2030-01-01T00:00:00",
                 "--execute")
    assert args.to_datetime == "2030-01-01T00:00:00" and args.execute


@pytest.mark.parametrize("argv,says", [
    (["groups", "reset-offsets", "g", "--topic", "t"], "one of the arguments"),
    (["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"], "not allowed with"),
    (["groups", "reset-offsets", "g", "--to-earliest"], "--topic"),
    (["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute"], "not allowed"),
    (["topics", "create", "t", "--partitions", "three"], "invalid int"),
    (["topics"], "ACTION"),
    (["groups", "describe"], "group"),
])
def test_bad_arguments_exit_2_with_the_reason(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("bootstrap,says", [
    ("nonsense", "expected host:port"),
    ("127.0.0.1:x", "expected host:port"),
])
def test_a_bad_bootstrap_server_is_an_error_not_a_traceback(bootstrap, says, capsys):
    assert main(["topics", "list", "--bootstrap-server", bootstrap]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gregor topics: ") and says in err


def test_an_unreachable_broker_is_an_error_not_a_traceback(capsys):
    port = free_port()
    assert main(["groups", "list", "--bootstrap-server", f"127.0.0.1:{port}"]) == 1
    assert capsys.readouterr().err.startswith(f"gregor groups: cannot connect to 127.0.0.1:{port}")
