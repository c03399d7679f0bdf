"""Tables for people, JSON for scripts (admin/output.py)."""

from __future__ import annotations

import argparse
import json

from gregor.admin.output import emit, format_table


def test_table_columns_are_left_aligned_two_spaces_apart():
    assert format_table(["A", "LONGER"], [["xyz", "1"], ["w", "22"]]) == [
        "A    LONGER",
        "xyz  1",
        "w    22",
    ]


def test_emit_a_table_with_missing_values_as_dashes(capsys):
    emit(argparse.Namespace(json=False), [{"topic": "t", "partition": 0, "lag": None},
                                          {"topic": "events", "partition": 10, "lag": 5}],
         ["topic", "partition", "lag"])
    assert capsys.readouterr().out == ("TOPIC   PARTITION  LAG\n"
                                       "t       0          -\n"
                                       "events  10         5\n")


def test_emit_one_row_and_no_rows(capsys):
    emit(argparse.Namespace(json=False), {"group": "g", "result": "deleted"}, ["group", "result"])
    emit(argparse.Namespace(json=False), [], ["group"])
    assert capsys.readouterr().out == "GROUP  RESULT\ng      deleted\n(none)\n"


def test_emit_json_keeps_every_field_and_types(capsys):
    data = [{"topic": "t", "partition": 0, "lag": None, "extra": [1, 2]}]
    emit(argparse.Namespace(json=True), data, ["topic"])
    assert json.loads(capsys.readouterr().out) == data


def test_without_a_json_option_emit_prints_a_table(capsys):
    emit(argparse.Namespace(), [{"a": 1}], ["a"])
    assert capsys.readouterr().out == "A\n1\n"
