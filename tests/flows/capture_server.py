"""An HTTP server on loopback standing in for an outside host: it records every request that reaches it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


@contextmanager
def capture_server() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """Yields (base URL ending in /v1, the (path, lower-cased headers) of every request received); checked to capture
    a probe request (with its Authorization header) before it is handed out empty."""
    seen: list[tuple[str, dict[str, str]]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _record(self) -> None:
            seen.append((self.path, {name.lower(): value for name, value in self.headers.items()}))
            self.send_response(503)
            self.end_headers()

        do_GET = do_POST = _record

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        httpx.post(f"{url}/probe", headers={"Authorization": "Bearer probe"}, timeout=5)
        assert [(path, headers.get("authorization")) for path, headers in seen] == [("/v1/probe", "Bearer probe")]
        seen.clear()
        yield url, seen
    finally:
        server.shutdown()
        server.server_close()
