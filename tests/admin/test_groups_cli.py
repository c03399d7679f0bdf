"""``gregor groups`` pieces that need no broker (admin/groups_cli.py): times and topic lists as
operators type them."""

from __future__ import annotations

import pytest

from gregor.admin.client import AdminClient, AdminError
from gregor.admin.groups_cli import _parse_datetime, _parse_topics


@pytest.mark.parametrize("text,ms", [
    ("1970-01-01T00:00:01", 1000),  # no zone: UTC
    ("2030-01-01T00:00:00+00:00", 1893456000000),
    ("2030-01-01T01:00:00+01:00", 1893456000000),
    ("2030-01-01T00:00:00.250Z", 1893456000250),
])
def test_to_datetime_accepts_iso_8601(text, ms):
    assert _parse_datetime(text) == ms


def test_to_datetime_refuses_anything_else():
    with pytest.raises(AdminError, match="expected ISO 8601"):
        _parse_datetime("yesterday")


def test_topics_with_partitions_need_no_metadata():
    # no broker behind the client: naming the partitions must not ask for metadata
    admin = AdminClient("127.0.0.1:9")
    assert _parse_topics(["b:2,0", "a:1", "b:0"], admin) == [("a", 1), ("b", 0), ("b", 2)]


def test_admin_client_bootstrap_is_checked_before_connecting():
    assert AdminClient("broker.example:9092,other:9093").bootstrap == ("broker.example", 9092)
    with pytest.raises(AdminError, match="host:port"):
        AdminClient(":9092")
