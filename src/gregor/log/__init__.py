"""Partition logs laid out on disk the way Kafka lays them out. Knows nothing of groups."""
