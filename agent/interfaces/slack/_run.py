"""`crashcart slack`: the app on Socket Mode (the default: no public URL needed) or over HTTP.

HTTP mode serves Slack's one request URL (`/slack/events`: events, the slash command and
button clicks alike) with the standard library's threading server in front of Bolt's
`dispatch`, which verifies each request's signature before any listener sees it.
"""

from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

EVENTS_PATH = "/slack/events"
log = logging.getLogger("crashcart.slack")


def serve_socket_mode(app: Any, app_token: str) -> None:
    """Connect out to Slack (apps.connections.open through the app's own client) and serve until stopped."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    SocketModeHandler(app, app_token).start()


def http_server(app: Any, host: str, port: int) -> ThreadingHTTPServer:
    """A server for Slack's request URL; call serve_forever() on it."""
    return ThreadingHTTPServer((host, port), _handler_for(app))


def dispatch(app: Any, body: str, query: str, headers: dict[str, list[str]]) -> Any:
    """One request through Bolt (signature first, then the listeners). A body Bolt cannot even read
    (its context fields of the wrong type) is a 400, not a traceback: nothing was verified or run."""
    from slack_bolt.request import BoltRequest
    from slack_bolt.response import BoltResponse

    try:
        request = BoltRequest(body=body, query=query, headers=headers)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
        log.warning("refused a Slack request Bolt cannot read: %s", type(e).__name__)
        return BoltResponse(status=400, body={"error": "malformed request"})
    return app.dispatch(request)


def _handler_for(app: Any) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # requests are not worth a line each on the console
            pass

        def do_GET(self) -> None:
            self._send(404 if urlparse(self.path).path != "/healthz" else 200, b"")

        def do_POST(self) -> None:
            url = urlparse(self.path)
            if url.path != EVENTS_PATH:
                self._send(404, b"")
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8")
            headers = {k.lower(): [v] for k, v in self.headers.items()}
            response = dispatch(app, body, url.query, headers)
            self.send_response(response.status)
            for name, values in response.headers.items():
                for value in values:
                    self.send_header(name, value)
            data = (response.body or "").encode("utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
