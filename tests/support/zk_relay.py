"""A TCP relay in front of a ZooKeeper server, to cut the brokers off ZooKeeper while it runs on
(the cluster tests of faults: tests/cluster/test_faults.py, tests/cluster/test_replication_defects.py)."""

from __future__ import annotations

import contextlib
import socket
import threading


class ZkRelay:
    """A TCP relay in front of a ZooKeeper server (for the brokers' and the test's clients):
    ``cut()`` drops every connection and closes new ones at once, ``restore()`` relays again.
    While cut, ZooKeeper runs on and expires the sessions it no longer hears from."""

    def __init__(self, server: object) -> None:
        self.server = server
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut_off = False
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="zk-relay", daemon=True).start()

    def connect_string(self, chroot: str = "") -> str:
        return f"127.0.0.1:{self.port}{chroot}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.cut_off:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.server.port))  # type: ignore[attr-defined]
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks |= {client, upstream}
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._socks -= {src, dst}

    def cut(self) -> None:
        self.cut_off = True
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        self.cut_off = False

    def close(self) -> None:
        self.cut()
        self.listener.close()
