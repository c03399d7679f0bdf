"""A real Spark session in local mode (and a standalone cluster for one test), against real
brokers started by the fixtures of tests/conftest.py."""

from __future__ import annotations

import pytest

from tests.support.spark_session import new_session


@pytest.fixture(scope="session")
def spark():
    s = new_session()
    yield s
    s.stop()
