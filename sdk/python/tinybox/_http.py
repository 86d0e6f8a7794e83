"""The one place that speaks HTTP: a connection per request (so a client
is safe to share between threads), the bearer token on every request,
and every non-2xx answer turned into a :class:`TinyboxError`."""

from __future__ import annotations

import http.client
import json
import os
import urllib.parse
from typing import Any, Dict, Iterator, Optional

from .errors import ConnectionFailedError, TinyboxError, refusal

URL_VAR = "TINYBOX_API_URL"
TOKEN_VAR = "TINYBOX_API_TOKEN"


class Client:
    """Where the server is and the token it takes.

    Both default to ``TINYBOX_API_URL`` and ``TINYBOX_API_TOKEN``, which
    ``eval "$(tinybox serve env)"`` sets.
    """

    def __init__(self, api_url: Optional[str] = None, token: Optional[str] = None, timeout: float = 600.0):
        api_url = api_url or os.environ.get(URL_VAR)
        token = token or os.environ.get(TOKEN_VAR)
        if not api_url:
            raise TinyboxError(f"no server address: pass api_url= or set {URL_VAR} (eval \"$(tinybox serve env)\")")
        if not token:
            raise TinyboxError(f"no token: pass token= or set {TOKEN_VAR} (eval \"$(tinybox serve env)\")")
        parsed = urllib.parse.urlsplit(api_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise TinyboxError(f"api_url {api_url!r} is not an http:// or https:// URL (like http://127.0.0.1:49982)")
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._parsed = parsed

    def _connection(self) -> http.client.HTTPConnection:
        p = self._parsed
        cls = http.client.HTTPSConnection if p.scheme == "https" else http.client.HTTPConnection
        return cls(p.hostname, p.port, timeout=self.timeout)

    def _send(
        self,
        method: str,
        path: str,
        query: Optional[Dict[str, str]] = None,
        body: Optional[bytes] = None,
        content_type: Optional[str] = None,
    ) -> "_Answer":
        target = self._parsed.path.rstrip("/") + path
        if query:
            target += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        conn = self._connection()
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError as e:
            conn.close()
            raise ConnectionFailedError(f"cannot reach tinybox serve at {self.api_url}: {e}") from e
        if resp.status >= 300:
            raw = resp.read()
            conn.close()
            raise _refusal_of(resp.status, raw)
        return _Answer(conn, resp)

    def json(self, method: str, path: str, body: Any = None, query: Optional[Dict[str, str]] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        with self._send(method, path, query, data, "application/json" if data is not None else None) as resp:
            return json.loads(resp.read() or b"null")

    def bytes(self, method: str, path: str, query: Dict[str, str], body: Optional[bytes] = None) -> bytes:
        ctype = "application/octet-stream" if body is not None else None
        with self._send(method, path, query, body, ctype) as resp:
            return resp.read()

    def lines(self, path: str, body: Any) -> Iterator[Dict[str, Any]]:
        """POSTs ``body`` and yields each JSON line of the answer as it comes."""
        with self._send("POST", path, None, json.dumps(body).encode(), "application/json") as resp:
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise ConnectionFailedError(f"the stream from {self.api_url} broke off: {e}") from e
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)


class _Answer:
    """A response and its connection, both closed on leaving the block."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.conn = conn
        self.resp = resp

    def __enter__(self) -> http.client.HTTPResponse:
        return self.resp

    def __exit__(self, *exc: Any) -> None:
        self.resp.close()
        self.conn.close()


def _refusal_of(status: int, raw: bytes) -> TinyboxError:
    try:
        err = json.loads(raw)["error"]
        return refusal(status, err.get("kind"), err.get("message", ""))
    except (ValueError, KeyError, TypeError):
        text = raw.decode("utf-8", "replace").strip()
        return refusal(status, None, text or f"HTTP {status} with no error body")
