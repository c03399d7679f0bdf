"""meta.properties (cluster/meta_properties.py): the cluster id and node id a data directory
belongs to."""

from __future__ import annotations

import re

import pytest

from gregor.cluster.meta_properties import load_cluster_id
from gregor.config import ConfigError


def test_a_new_directory_gets_a_random_id_in_kafkas_format_and_keeps_it(tmp_path):
    cid = load_cluster_id(tmp_path, 3, None)
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid)
    assert (tmp_path / "meta.properties").read_text() == f"version=1\ncluster.id={cid}\nnode.id=3\n"
    assert load_cluster_id(tmp_path, 3, None) == cid
    assert load_cluster_id(tmp_path, 3, cid) == cid  # configured and stored agree
    other = tmp_path / "other"
    other.mkdir()
    assert load_cluster_id(other, 3, None) != cid


def test_the_configured_id_is_stored(tmp_path):
    assert load_cluster_id(tmp_path, 0, "my-cluster") == "my-cluster"
    assert "cluster.id=my-cluster" in (tmp_path / "meta.properties").read_text()
    assert load_cluster_id(tmp_path, 0, None) == "my-cluster"


def test_another_cluster_or_node_is_refused(tmp_path):
    load_cluster_id(tmp_path, 1, "a")
    with pytest.raises(ConfigError, match="cluster.id=b does not match a"):
        load_cluster_id(tmp_path, 1, "b")
    with pytest.raises(ConfigError, match="node.id=2 does not match node.id=1"):
        load_cluster_id(tmp_path, 2, None)
    assert (tmp_path / "meta.properties").read_text() == "version=1\ncluster.id=a\nnode.id=1\n"


def test_kafkas_own_file_is_read(tmp_path):
    (tmp_path / "meta.properties").write_text("#\n#Tue Jan 01 00:00:00 UTC 2030\nnode.id=4\nversion=1\n"
                                              "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")
    assert load_cluster_id(tmp_path, 4, None) == "MkU3OEVBNTcwNTJENDM2Qk"
