"""A real Spark session in local mode for the lag report's job tests (as in tests/spark)."""

from __future__ import annotations

import pytest

from tests.support.spark_session import new_session


@pytest.fixture(scope="session")
def spark():
    s = new_session()
    yield s
    s.stop()
