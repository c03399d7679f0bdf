"""Metrics: group attribution of consumption, and a Prometheus endpoint."""
