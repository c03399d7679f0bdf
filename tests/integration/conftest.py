"""The integration tests use the real-broker fixtures of tests/conftest.py (``broker``,
``broker_factory``); the broker process itself is in tests/support/broker_process.py."""

# Kept importable from here until the integration tests import them from tests.support
from tests.support.broker_process import BrokerProcess, free_port  # noqa: F401
