"""Operator tools that speak the Kafka protocol, so they work against any Kafka-compatible
cluster: a small blocking admin client and the ``gregor groups`` / ``gregor topics`` commands."""
