"""Gregor: a Kafka-wire-compatible broker in Python."""

__version__ = "0.1.0"
