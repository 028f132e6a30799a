"""A loopback Slack Web API server in Slack's own wire format, for driving slack_sdk and Bolt.

Methods are POSTed (form-encoded or JSON) or GET-queried at /api/<method>, the token comes as
`Authorization: Bearer ...` or a `token` parameter, and every answer is HTTP 200 with an
`ok`/`error` envelope, except rate limits: HTTP 429, `Retry-After`, `{"ok": false, "error":
"ratelimited"}`. Timestamps are `ts` strings ("1732500000.000100"), unique per workspace.
What real Slack answers, and this server too:

- no token: `not_authed`; an unknown token: `invalid_auth`; an app-level token (xapp-) on a
  bot method, or a bot token on apps.connections.open: `not_allowed_token_type`;
- a scope the token lacks: `missing_scope` with `needed` and `provided`;
- an unknown channel: `channel_not_found`; an unknown message: `message_not_found`; a thread
  that does not exist: `thread_not_found`; a message someone else posted: `cant_update_message`;
- JSON without `charset` in its content type: a `missing_charset` warning in
  `response_metadata.warnings`; paginated methods carry `response_metadata.next_cursor`.

Methods: auth.test, chat.postMessage (thread_ts), chat.update, chat.postEphemeral,
conversations.replies, users.info, apps.connections.open (the URL of the Socket Mode server
that `attach`ed itself, see slack_socket.py), and POST /response/<id> for the response_url
that Bolt's `respond()` uses (answers `ok` as plain text, as hooks.slack.com does).

    server = SlackApiServer().start()
    WebClient(token=server.bot_token, base_url=server.base_url + "/api/")
    server.calls("chat.update")              # every call, in order, with its parameters
    server.fail("chat.postMessage", "ratelimited", times=2, retry_after=1)
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

TEAM_ID = "T0CRASHCRT"
BOT_USER_ID = "U0CRASHBOT"
BOT_ID = "B0CRASHBOT"
APP_ID = "A0CRASHAPP"

# The scope each method needs, as Slack's method pages list them (a bot token's scopes).
NEEDED_SCOPE = {
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "chat.postEphemeral": "chat:write",
    "conversations.replies": "channels:history",
    "users.info": "users:read",
}
BOT_SCOPES = ("app_mentions:read", "channels:history", "chat:write", "commands", "groups:history",
              "im:history", "users:read")


@dataclass
class Call:
    """One request as the server received it."""

    method: str
    params: dict[str, Any]
    token: str | None
    http_method: str
    content_type: str
    at: float = field(default_factory=time.time)
    answer: dict[str, Any] | None = None
    status: int = 200


@dataclass
class Failure:
    error: str
    times: int
    status: int
    retry_after: int | None


class SlackError(Exception):
    def __init__(self, error: str, **extra: Any):
        super().__init__(error)
        self.error = error
        self.extra = extra


class Workspace:
    """Channels (with their messages) and users, as one Slack team holds them."""

    def __init__(self) -> None:
        self.channels: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self._clock = itertools.count(1)
        self.add_user(BOT_USER_ID, "crashcart", is_bot=True)
        for cid, name in (("C0ONCALL01", "oncall"), ("C0GENERAL1", "general")):
            self.add_channel(cid, name)

    def add_channel(self, channel_id: str, name: str) -> dict[str, Any]:
        self.channels[channel_id] = {"id": channel_id, "name": name, "messages": []}
        return self.channels[channel_id]

    def add_user(self, user_id: str, name: str, *, real_name: str | None = None, is_bot: bool = False,
                 email: str | None = None) -> dict[str, Any]:
        real = real_name or name
        self.users[user_id] = {
            "id": user_id, "team_id": TEAM_ID, "name": name, "deleted": False, "color": "9f69e7",
            "real_name": real, "tz": "Europe/London", "tz_label": "Greenwich Mean Time", "tz_offset": 0,
            "profile": {"real_name": real, "display_name": name, "email": email, "team": TEAM_ID,
                        "real_name_normalized": real, "display_name_normalized": name},
            "is_admin": False, "is_owner": False, "is_bot": is_bot, "is_app_user": False,
            "updated": 1732500000,
        }
        return self.users[user_id]

    def next_ts(self) -> str:
        # Seconds and a six-digit sequence, like Slack's; unique and ordered within the team.
        n = next(self._clock)
        return f"{int(time.time())}.{n:06d}"

    def channel(self, ref: Any) -> dict[str, Any]:
        ref = str(ref or "")
        if ref in self.channels:
            return self.channels[ref]
        name = ref.lstrip("#")
        for ch in self.channels.values():
            if ch["name"] == name:
                return ch
        raise SlackError("channel_not_found")

    def message(self, channel: dict[str, Any], ts: Any) -> dict[str, Any]:
        for m in channel["messages"]:
            if m["ts"] == str(ts):
                return m
        raise SlackError("message_not_found")

    def post(self, channel_ref: Any, *, user: str, text: str = "", blocks: list | None = None,
             thread_ts: str | None = None, bot: bool = False) -> dict[str, Any]:
        """A message as a person (bot=False) or the app's bot posted it."""
        channel = self.channel(channel_ref)
        msg: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": self.next_ts(), "team": TEAM_ID}
        if blocks:
            msg["blocks"] = blocks
        if bot:
            msg.update(bot_id=BOT_ID, app_id=APP_ID)
        if thread_ts:
            msg["thread_ts"] = str(thread_ts)
            for parent in channel["messages"]:
                if parent["ts"] == str(thread_ts):
                    msg["parent_user_id"] = parent["user"]
                    parent.setdefault("thread_ts", parent["ts"])
                    parent["reply_count"] = parent.get("reply_count", 0) + 1
                    parent["latest_reply"] = msg["ts"]
        channel["messages"].append(msg)
        return msg

    def thread(self, channel_ref: Any, ts: Any) -> list[dict[str, Any]]:
        """The parent and its replies, oldest first (what conversations.replies pages through)."""
        channel = self.channel(channel_ref)
        parent = next((m for m in channel["messages"] if m["ts"] == str(ts)), None)
        if parent is None:
            raise SlackError("thread_not_found")
        replies = [m for m in channel["messages"] if m.get("thread_ts") == str(ts) and m is not parent]
        return [parent, *replies]


class SlackApiServer:
    """The Web API on 127.0.0.1 (an ephemeral port unless given), in a background thread."""

    def __init__(self, *, port: int = 0, bot_token: str = "xoxb-0000000000-crashcart-test",
                 app_token: str = "xapp-1-A0CRASHAPP-0000-crashcart-test", scopes: tuple[str, ...] = BOT_SCOPES):
        self.bot_token = bot_token
        self.app_token = app_token
        self.scopes = tuple(scopes)
        self.workspace = Workspace()
        self.responses: list[dict[str, Any]] = []  # bodies POSTed to response_url, in order
        self.ephemeral: list[dict[str, Any]] = []  # chat.postEphemeral messages (only their user sees them)
        self.socket_url: Callable[[], str] | None = None  # set by the Socket Mode server's attach()
        self._calls: list[Call] = []
        self._failures: dict[str, list[Failure]] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "SlackApiServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="slack-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset(self) -> None:
        """A fresh workspace between tests: no calls, messages, responses or pending failures."""
        with self._lock:
            self.workspace = Workspace()
            self.responses.clear()
            self.ephemeral.clear()
            self._calls.clear()
            self._failures.clear()

    # --- what tests read and arrange -------------------------------------------------------

    def calls(self, method: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if method is None or c.method == method]

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """Every message in a channel (top level and replies), oldest first."""
        return list(self.workspace.channel(channel)["messages"])

    def fail(self, method: str, error: str = "ratelimited", *, times: int = 1, retry_after: int | None = None,
             status: int | None = None) -> None:
        """The next `times` calls of `method` fail with `error`: ratelimited is HTTP 429 with
        Retry-After (1 s unless given); anything else is HTTP 200 (or `status`) with ok=false."""
        if error == "ratelimited":
            status, retry_after = status or 429, 1 if retry_after is None else retry_after
        with self._lock:
            self._failures.setdefault(method, []).append(Failure(error, times, status or 200, retry_after))

    def response_url(self, name: str = "1") -> str:
        return f"{self.base_url}/response/{name}"

    # --- the methods ----------------------------------------------------------------------

    def handle(self, method: str, params: dict[str, Any], token: str | None) -> dict[str, Any]:
        if method not in METHODS:
            raise SlackError("unknown_method")
        if not token:
            raise SlackError("not_authed")
        if token not in (self.bot_token, self.app_token):
            raise SlackError("invalid_auth")
        wants_app_token = method == "apps.connections.open"
        if (token == self.app_token) != wants_app_token:
            raise SlackError("not_allowed_token_type")
        needed = NEEDED_SCOPE.get(method)
        if needed and needed not in self.scopes:
            raise SlackError("missing_scope", needed=needed, provided=",".join(self.scopes))
        return METHODS[method](self, params)

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": "https://crashcart-test.slack.com/", "team": "crashcart test", "user": "crashcart",
                "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID, "is_enterprise_install": False}

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        text, blocks = params.get("text") or "", params.get("blocks")
        if not text and not blocks and not params.get("attachments"):
            raise SlackError("no_text")
        channel = self.workspace.channel(params.get("channel"))
        msg = self.workspace.post(channel["id"], user=BOT_USER_ID, text=text, blocks=blocks,
                                  thread_ts=params.get("thread_ts"), bot=True)
        return {"ok": True, "channel": channel["id"], "ts": msg["ts"], "message": dict(msg)}

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self.workspace.channel(params.get("channel"))
        msg = self.workspace.message(channel, params.get("ts"))
        if msg.get("bot_id") != BOT_ID:
            raise SlackError("cant_update_message")
        if "text" in params:
            msg["text"] = params["text"] or ""
        if "blocks" in params:
            msg["blocks"] = params["blocks"]
        msg["edited"] = {"user": BOT_USER_ID, "ts": self.workspace.next_ts()}
        return {"ok": True, "channel": channel["id"], "ts": msg["ts"], "text": msg["text"], "message": dict(msg)}

    def _post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self.workspace.channel(params.get("channel"))
        if params.get("user") not in self.workspace.users:
            raise SlackError("user_not_in_channel")
        if not params.get("text") and not params.get("blocks"):
            raise SlackError("no_text")
        ts = self.workspace.next_ts()
        self.ephemeral.append({"channel": channel["id"], "user": params["user"], "text": params.get("text") or "",
                               "blocks": params.get("blocks"), "thread_ts": params.get("thread_ts"), "ts": ts})
        return {"ok": True, "message_ts": ts}

    def _replies(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("ts"):
            raise SlackError("invalid_arguments")
        thread = self.workspace.thread(params.get("channel"), params["ts"])
        limit = int(params.get("limit") or 1000)
        start = 0
        if params.get("cursor"):
            after = base64.b64decode(str(params["cursor"])).decode().removeprefix("next_ts:")
            start = next((i for i, m in enumerate(thread) if m["ts"] == after), len(thread))
        page = thread[start:start + limit]
        more = start + limit < len(thread)
        cursor = base64.b64encode(f"next_ts:{thread[start + limit]['ts']}".encode()).decode() if more else ""
        return {"ok": True, "messages": [dict(m) for m in page], "has_more": more,
                "response_metadata": {"next_cursor": cursor}}

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.workspace.users.get(str(params.get("user") or ""))
        if user is None:
            raise SlackError("user_not_found")
        return {"ok": True, "user": user}

    def _connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.socket_url is None:
            # What Slack says when the app has Socket Mode turned off.
            raise SlackError("socket_mode_not_enabled")
        return {"ok": True, "url": self.socket_url()}

    # --- the HTTP side ----------------------------------------------------------------------

    def _take_failure(self, method: str) -> Failure | None:
        with self._lock:
            queue = self._failures.get(method) or []
            if not queue:
                return None
            failure = queue[0]
            failure.times -= 1
            if failure.times <= 0:
                queue.pop(0)
            return failure

    def _record(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)


METHODS: dict[str, Callable[[SlackApiServer, dict[str, Any]], dict[str, Any]]] = {
    "auth.test": SlackApiServer._auth_test,
    "chat.postMessage": SlackApiServer._post_message,
    "chat.update": SlackApiServer._update,
    "chat.postEphemeral": SlackApiServer._post_ephemeral,
    "conversations.replies": SlackApiServer._replies,
    "users.info": SlackApiServer._users_info,
    "apps.connections.open": SlackApiServer._connections_open,
}


def _parse_params(query: str, body: bytes, content_type: str) -> dict[str, Any]:
    params: dict[str, Any] = {k: v[-1] for k, v in parse_qs(query).items()}
    if body:
        if content_type.startswith("application/json"):
            params.update(json.loads(body.decode("utf-8")))
        else:
            params.update({k: v[-1] for k, v in parse_qs(body.decode("utf-8")).items()})
    # Form-encoded requests carry blocks and attachments as JSON strings.
    for key in ("blocks", "attachments"):
        if isinstance(params.get(key), str):
            params[key] = json.loads(params[key])
    return params


def _handler_for(server: SlackApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            url = urlparse(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type = self.headers.get("Content-Type") or ""
            if url.path.startswith("/response/"):
                server.responses.append(json.loads(body or b"{}") | {"_path": url.path})
                return self._send(200, b"ok", "text/plain; charset=utf-8")
            if not url.path.startswith("/api/"):
                return self._send(404, b"Not Found", "text/plain")
            method = url.path.removeprefix("/api/")
            try:
                params = _parse_params(url.query, body, content_type)
            except (ValueError, UnicodeDecodeError):
                return self._answer(Call(method, {}, None, self.command, content_type), {"ok": False, "error": "invalid_json"})
            auth = self.headers.get("Authorization") or ""
            token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else params.pop("token", None)
            call = Call(method, params, token, self.command, content_type)
            failure = server._take_failure(method)
            if failure is not None:
                headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
                return self._answer(call, {"ok": False, "error": failure.error}, failure.status, headers)
            try:
                answer = server.handle(method, params, token)
            except SlackError as e:
                answer = {"ok": False, "error": e.error, **e.extra}
            if content_type.startswith("application/json") and "charset" not in content_type:
                answer["warning"] = "missing_charset"
                answer.setdefault("response_metadata", {})["warnings"] = ["missing_charset"]
            self._answer(call, answer)

        def _answer(self, call: Call, answer: dict[str, Any], status: int = 200,
                    headers: dict[str, str] | None = None) -> None:
            call.answer, call.status = answer, status
            server._record(call)
            extra = {"X-OAuth-Scopes": ",".join(server.scopes), **(headers or {})}
            self._send(status, json.dumps(answer).encode(), "application/json; charset=utf-8", extra)

        def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    return Handler


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8912)
    args = parser.parse_args()
    srv = SlackApiServer(port=args.port).start()
    print(f"Slack Web API on {srv.base_url}/api/  bot token {srv.bot_token}  app token {srv.app_token}")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        srv.stop()
