"""ClusterMetadata (cluster/metadata.py) on one node: this broker is every answer."""

from __future__ import annotations

from gregor.cluster.metadata import BrokerEndpoint, ClusterMetadata, PartitionLeadership
from gregor.security.listeners import Listener


def test_one_node_is_the_controller_and_leads_every_partition():
    cluster = ClusterMetadata(5, rack="r1")
    cluster.set_endpoint("broker.example", 19092)
    assert cluster.controller_id == 5
    plaintext = (Listener("PLAINTEXT", "PLAINTEXT", "broker.example", 19092),)
    assert cluster.this_broker() == BrokerEndpoint(5, "broker.example", 19092, "r1", plaintext)
    assert cluster.brokers() == [BrokerEndpoint(5, "broker.example", 19092, "r1", plaintext)]
    assert cluster.this_broker().at("PLAINTEXT") == ("broker.example", 19092)
    assert cluster.this_broker().at("SASL_SSL") is None and cluster.this_broker().at(None) == ("broker.example", 19092)
    assert cluster.partition("any", 7) == PartitionLeadership(leader=5, leader_epoch=0, replicas=[5], isr=[5])


def test_endpoint_is_unknown_until_the_listener_is_bound():
    cluster = ClusterMetadata(0)
    assert cluster.this_broker() == BrokerEndpoint(0, "", 0, None) and cluster.cluster_id == ""
