"""Cluster metadata: topics, partitions, brokers. A single node today."""
