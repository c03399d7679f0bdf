"""``meta.properties`` in the data directory: the cluster id and node id the storage belongs to,
as Kafka keeps them. A data directory is never opened by another cluster or node by mistake."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from gregor.config import ConfigError

FILE = "meta.properties"


def load_cluster_id(data_dir: Path, node_id: int, configured: str | None) -> str:
    """The stored cluster id, checked against ``cluster.id`` and ``node.id``; a new directory gets
    the configured id or a random one (Kafka's format: 22 url-safe base64 characters)."""
    stored = stored_cluster_id(data_dir, node_id)
    if stored and configured and stored != configured:
        raise ConfigError(f"cluster.id={configured} does not match {stored} stored in {data_dir / FILE}")
    cid = stored or configured or random_cluster_id()
    if not stored:
        store_cluster_id(data_dir, node_id, cid)
    return cid


def stored_cluster_id(data_dir: Path, node_id: int) -> str | None:
    """The cluster id in meta.properties (None for a new directory), after checking its node id.
    A broker of a ZooKeeper cluster takes the cluster's id from ZooKeeper and keeps it here."""
    meta = data_dir / FILE
    values: dict[str, str] = {}
    if meta.exists():
        for line in meta.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                values[k.strip()] = v.strip()
    if values.get("cluster.id") and values.get("node.id") and int(values["node.id"]) != node_id:
        raise ConfigError(f"node.id={node_id} does not match node.id={values['node.id']} in {meta}")
    return values.get("cluster.id") or None


def store_cluster_id(data_dir: Path, node_id: int, cluster_id: str) -> None:
    (data_dir / FILE).write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")


def random_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
