"""ZooKeeper: the asyncio client (client.py) and Kafka's node layout and formats (znodes.py)."""
