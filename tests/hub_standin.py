"""A local stand-in for Harbor's Hub API (PostgREST), answering the three requests Harbor 0.26's
HarborRegistryClient makes, in the shapes its code reads, from registry.json rows."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def hub_standin(rows: list[dict[str, Any]], seen_keys: list[str]) -> Iterator[str]:
    """The stand-in's base URL while the block runs; each request's `apikey` header is appended to seen_keys."""

    class Hub(http.server.BaseHTTPRequestHandler):
        def answer(self, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen_keys.append(self.headers.get("apikey", ""))
            url = urllib.parse.urlparse(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if url.path != "/rest/v1/dataset":
                return self.send_error(404)
            chosen = [r for r in rows if query.get("name") in (None, f"eq.{r['name']}")]
            if query.get("select") == "version":
                return self.answer([{"version": r["version"]} for r in chosen])
            self.answer([{"name": r["name"], "version": r["version"], "description": r.get("description"),
                          "dataset_task": [{"count": len(r["tasks"])}]} for r in chosen])

        def do_POST(self) -> None:  # noqa: N802
            seen_keys.append(self.headers.get("apikey", ""))
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/rest/v1/rpc/get_dataset":
                return self.send_error(404)
            match = [r for r in rows if (r["name"], r["version"]) == (body["p_name"], body["p_version"])]
            if not match:
                return self.answer(None)
            row = match[0]
            self.answer({"name": row["name"], "version": row["version"], "description": row.get("description"),
                         "tasks": row["tasks"] + row["tasks"][:1],  # the legacy backend's duplicate row
                         "metrics": [{"name": "mean", "kwargs": {}}]})

        def log_message(self, *args: Any) -> None:
            pass

    with served(Hub) as base:
        yield base


@contextmanager
def served(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` on a free port of 127.0.0.1 while the block runs; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
