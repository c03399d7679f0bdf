"""When a broker's own connection (cluster/broker_client.py) replaces its SASL session (KIP-368,
connections.max.reauth.ms): at 85% of the lifetime, but at least a second before its end (half-way
for sessions of two seconds or less), so that a request sent just before the renewal still arrives
inside the session on a loaded machine."""

from __future__ import annotations

import pytest

from gregor.cluster.broker_client import renew_after_s


@pytest.mark.parametrize(("lifetime_ms", "after_s"), [
    (3_600_000, 3060.0),  # an hour: at 85%
    (10_000, 8.5),  # 1.5 s before the end
    (4_000, 3.0),  # 85% would leave 0.6 s: a second
    (2_000, 1.0),  # half-way
    (500, 0.25),
])
def test_renewal_time(lifetime_ms, after_s):
    assert renew_after_s(lifetime_ms) == pytest.approx(after_s)
