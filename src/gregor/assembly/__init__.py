"""The broker's assembly: two builders, one for a single node (single_node.py) and one for a
ZooKeeper cluster (zk_cluster.py), each returning the same parts (parts.py). The one-node/cluster
choice is made here and nowhere above the replication seam; broker.py keeps only the lifecycle."""

from gregor.assembly.parts import BrokerParts, Membership, build_parts

__all__ = ["BrokerParts", "Membership", "build_parts"]
