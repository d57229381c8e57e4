"""Direct TCP links for a step's messages: the driver to each replica, replica to replica.

Dask's comms carry everything else (building replicas, digests, states, aborts, recovery);
a step's request, its reply and the tree's values go over plain blocking sockets instead,
read and written by the threads that use them: a round trip costs two process wake-ups
(~20 us on localhost) where a Dask request costs event-loop and thread hand-offs on both
sides (~0.3 ms measured on the 2-core machine, more under load). Messages are ``gdist.wire``
messages (msgpack and raw array buffers; nothing unpickled but the exceptions a replica
reports to its driver, as Dask's own comms do). Links exist only between workers whose Dask
address is ``tcp://`` (the socket is bound to the worker's own host): TLS and in-process
clusters keep Dask's comms for steps too.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from . import wire

Address = tuple[str, int]


def tcp_host(address: str | None) -> str | None:
    """The host of a ``tcp://host:port`` Dask address (None for any other scheme)."""
    if not isinstance(address, str) or not address.startswith("tcp://"):
        return None
    from distributed.comm import parse_host_port

    return parse_host_port(address[len("tcp://"):])[0]


class Link:
    """One connection, sends serialized by a lock (a socket written by several threads)."""

    def __init__(self, address: Address, timeout: float) -> None:
        self.address = tuple(address)
        self.sock = socket.create_connection(self.address, timeout=timeout)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._lock = threading.Lock()

    def send(self, msg: Any) -> None:
        """Send one message (blocking until the socket took it)."""
        with self._lock:
            wire.send(self.sock, msg)

    def recv(self) -> Any:
        """The next message (``wire.WireError`` when the other side closed)."""
        return wire.recv(self.sock)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        try:
            self.sock.close()
        except OSError:
            pass


class Links:
    """Open links by address, made on first use; a link that fails is dropped and made
    again once."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._open: dict[Address, Link] = {}
        self._lock = threading.Lock()

    def get(self, address: Address) -> Link:
        """The open link to ``address`` (connecting: OSError when nothing listens there)."""
        address = (str(address[0]), int(address[1]))
        with self._lock:
            link = self._open.get(address)
        if link is None:
            link = Link(address, self.timeout)
            with self._lock:
                old = self._open.get(address)
                if old is not None:
                    link.close()
                    return old
                self._open[address] = link
        return link

    def drop(self, address: Address) -> None:
        """Close and forget the link to ``address`` (its stream is in an unknown state)."""
        with self._lock:
            link = self._open.pop((str(address[0]), int(address[1])), None)
        if link is not None:
            link.close()

    def send(self, address: Address, msg: Any) -> None:
        """Send ``msg`` to ``address``: on a failure the link is made again and the message
        sent once more (a cached connection to a process that is gone); OSError if that
        fails too."""
        try:
            self.get(address).send(msg)
        except OSError:
            self.drop(address)
            self.get(address).send(msg)

    def close(self) -> None:
        """Close every link."""
        with self._lock:
            links, self._open = list(self._open.values()), {}
        for link in links:
            link.close()


class Server:
    """A listening socket on ``host``; each accepted connection gets a thread that reads its
    messages and calls ``handle(msg, reply)`` for each (``reply(obj)`` answers on the same
    connection). A handler's exception closes that connection only."""

    def __init__(self, host: str, handle: Callable[[Any, Callable[[Any], None]], None]) -> None:
        self._handle = handle
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, 0), family=family)
        self.address: Address = (host, self._sock.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, name="gdist-link-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), name="gdist-link",
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        lock = threading.Lock()

        def reply(obj: Any) -> None:
            with lock:
                wire.send(conn, obj)

        try:
            while True:
                self._handle(wire.recv(conn), reply)
        except OSError:
            pass  # the other side closed (or the handler's reply could not be sent)
        except Exception:  # a message that is not a request: this connection ends
            logging.getLogger("gdist").exception("gdist: a link's request failed")
        finally:
            conn.close()

    def close(self) -> None:
        """Stop accepting (open connections end when their other side closes)."""
        self._closed = True
        try:  # shutdown wakes the thread blocked in accept (close alone does not, on Linux)
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
