"""A chroot of its own on the session's ZooKeeper server for each controller test."""

from __future__ import annotations

import pytest

from tests.cluster.controller.harness import new_chroot


@pytest.fixture
def connect(zookeeper):
    return zookeeper.connect_string(new_chroot())
