"""The auditor's side of the wire: a small synchronous client of the trainer service
(aiohttp's client on an event loop of its own), counting queries and bytes.

Every request has a bounded time (``timeout`` seconds in all, ``connect_timeout`` to
connect) and a bounded answer (``limit`` bytes: a larger Content-Length or body is refused
before it is read in full). Anything that is not a well-formed answer -- no connection, a
timeout, a dropped or truncated body, an HTTP error, the wrong content type, JSON that does
not parse -- raises ``TransportError``: the audit is then inconclusive, never a verdict.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

JSON_LIMIT = 8 << 20  # bytes of a JSON answer (a graph of a large model fits)


class TransportError(Exception):
    """The trainer could not be asked, or did not answer with a well-formed message."""


@dataclass
class Query:
    """One request and what it cost on the wire (request line + headers; status line +
    headers + body)."""

    path: str
    sent: int
    received: int
    status: int


def _head_bytes(headers: Any) -> int:
    return sum(len(k) + len(v) + 4 for k, v in headers) + 2


class Remote:
    """A trainer service at ``url`` (``http://host:port``)."""

    def __init__(self, url: str, timeout: float = 300.0, connect_timeout: float = 20.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in (
                "", "/") or parts.query:
            raise ValueError(f"Remote: url is {url!r}; expected http(s)://host:port")
        self.url = url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout)
        self.log: list[Query] = []
        self._runner = asyncio.Runner()
        self._session: aiohttp.ClientSession | None = None

    @property
    def queries(self) -> int:
        """Requests made so far."""
        return len(self.log)

    @property
    def sent(self) -> int:
        """Bytes sent so far (request lines and headers)."""
        return sum(q.sent for q in self.log)

    @property
    def received(self) -> int:
        """Bytes received so far (status lines, headers and bodies)."""
        return sum(q.received for q in self.log)

    async def _get(self, path: str, params: dict | None, limit: int, kind: str) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        what = f"GET {path}" + (f"?{'&'.join(f'{k}={v}' for k, v in params.items())}"
                                if params else "")
        try:
            async with self._session.get(self.url + path, params=params,
                                         allow_redirects=False) as r:
                info = r.request_info
                sent = len(f"GET {info.url.raw_path_qs} HTTP/1.1\r\n") + _head_bytes(
                    info.headers.items())
                head = len(f"HTTP/1.1 {r.status} {r.reason}\r\n") + _head_bytes(r.raw_headers)
                if r.content_length is not None and r.content_length > limit:
                    self.log.append(Query(what, sent, head, r.status))
                    raise TransportError(f"{what}: the answer is {r.content_length} bytes; at "
                                         f"most {limit} are expected")
                body = bytearray()
                async for chunk in r.content.iter_chunked(1 << 16):
                    body += chunk
                    if len(body) > limit:
                        self.log.append(Query(what, sent, head + len(body), r.status))
                        raise TransportError(f"{what}: the answer is over {limit} bytes")
                self.log.append(Query(what, sent, head + len(body), r.status))
                if r.status != 200:
                    text = bytes(body[:300]).decode("utf-8", "replace")
                    raise TransportError(f"{what}: the trainer answered {r.status} "
                                         f"{r.reason}: {text}")
                ctype = r.headers.get("Content-Type", "").split(";")[0].strip()
                want = "application/json" if kind == "json" else "application/octet-stream"
                if ctype != want:
                    raise TransportError(f"{what}: the answer is {ctype or 'untyped'}; "
                                         f"expected {want}")
                return bytes(body)
        except TransportError:
            raise
        except TimeoutError:
            raise TransportError(f"{what}: timed out (no complete answer within "
                                 f"{self.timeout.total} s)") from None
        except (aiohttp.ClientError, OSError, ValueError) as e:
            raise TransportError(f"{what}: {type(e).__name__}: {e}") from None

    def bytes(self, path: str, limit: int, params: dict | None = None) -> bytes:
        """The body of an octet-stream answer (at most ``limit`` bytes)."""
        return self._runner.run(self._get(path, params, limit, "bytes"))

    def json(self, path: str, params: dict | None = None, limit: int = JSON_LIMIT) -> Any:
        """The parsed body of a JSON answer."""
        body = self._runner.run(self._get(path, params, limit, "json"))
        try:
            return json.loads(body)
        except (UnicodeDecodeError, ValueError) as e:
            raise TransportError(f"GET {path}: the answer is not JSON ({e})") from None

    def close(self) -> None:
        """Close the connection pool and the event loop."""
        if self._session is not None:
            self._runner.run(self._session.close())
            self._session = None
        self._runner.close()

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
