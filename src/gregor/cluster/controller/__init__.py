"""The cluster's controller (Kafka 2.8, ZooKeeper mode): election, partition leadership, topic
creation and deletion, controlled shutdown, leader rebalance. See ``controller.py``."""

from gregor.cluster.controller.controller import Controller
from gregor.cluster.controller.zk_writes import ControllerMoved

__all__ = ["Controller", "ControllerMoved"]
