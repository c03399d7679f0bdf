"""The integration tests use the real-broker fixtures of tests/conftest.py (``broker``,
``broker_factory``); the broker process itself is in tests/support/broker_process.py."""
