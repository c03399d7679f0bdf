"""Coordinator runtime: results, deferred responses, keyed timers, shard executors, loading."""
