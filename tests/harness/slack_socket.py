"""A loopback Socket Mode server: the websocket end of Slack's Socket Mode, standard library only.

The app asks the Web API (slack_api.py) for apps.connections.open with its xapp- token and
gets `ws://127.0.0.1:PORT/link/?ticket=...&app_id=...`; a ticket opens one connection, once,
as Slack's do. On connect the server sends Slack's `hello`; tests then deliver envelopes in
Slack's shapes (`events_api`, `slash_commands`, `interactive`) and read back the client's acks
(`{"envelope_id": ..., "payload"?: ...}`). Pings are answered with pongs (slack_sdk's builtin
client pings every few seconds and reconnects when it hears nothing).

    socket = SlackSocketServer(api).start()     # api.socket_url now points here
    SocketModeHandler(app, api.app_token).connect()
    socket.wait_connected()
    envelope_id = socket.events_api({"type": "app_mention", ...})
    socket.wait_ack(envelope_id)
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, urlparse

from slack_api import APP_ID, BOT_ID, BOT_USER_ID, TEAM_ID, SlackApiServer

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_TEXT, OP_CLOSE, OP_PING, OP_PONG = 0x1, 0x8, 0x9, 0xA


class Connection:
    """One accepted websocket: frames out (unmasked, as a server sends) and in (masked)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.open = True
        self.retiring = False  # told to reconnect: hung up once the client's next connection is open
        self._send_lock = threading.Lock()

    def send(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n <= 125:
            header = struct.pack("!BB", 0x80 | opcode, n)
        elif n <= 0xFFFF:
            header = struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 127, n)
        with self._send_lock:
            self.sock.sendall(header + payload)

    def send_json(self, message: dict[str, Any]) -> None:
        self.send(OP_TEXT, json.dumps(message).encode("utf-8"))

    def read_frame(self) -> tuple[int, bytes]:
        b1, b2 = self._read(2)
        n = b2 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._read(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._read(8))
        mask = self._read(4) if b2 & 0x80 else b"\0\0\0\0"
        data = self._read(n)
        return b1 & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    def _read(self, n: int) -> bytes:
        chunks = b""
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("client closed the socket")
            chunks += chunk
        return chunks

    def close(self) -> None:
        """Hang up as a server does: the client's blocked read sees the end of the stream at once."""
        self.open = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


class SlackSocketServer:
    """Socket Mode on 127.0.0.1; attach()es itself to a SlackApiServer's apps.connections.open."""

    def __init__(self, api: SlackApiServer, *, port: int = 0):
        self.api = api
        self.acks: list[dict[str, Any]] = []  # every ack the client sent, in order
        self.sent: list[dict[str, Any]] = []  # every envelope delivered, in order
        self.handshakes: list[str] = []  # the request path of each websocket opened
        self._tickets: dict[str, bool] = {}  # ticket -> used
        self._connections: list[Connection] = []
        self._changed = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", port))
        self._running = False
        self._threads: list[threading.Thread] = []
        self._accepted: list[Connection] = []  # every connection, handshake done or not

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    def start(self) -> "SlackSocketServer":
        self._running = True
        self.api.socket_url = self.new_url
        self._spawn(self._accept_loop, name="slack-socket")
        return self

    def stop(self) -> None:
        self._running = False
        self.api.socket_url = None
        for conn in list(self._accepted):
            conn.close()
        # shutdown, not only close: a close leaves the thread blocked in accept() blocked.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for thread in self._threads:
            thread.join(10)

    def _spawn(self, target, *args: Any, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def reset(self) -> None:
        """Between tests: drop every connection, forget acks and envelopes."""
        for conn in list(self._connections):
            conn.close()
        with self._changed:
            self._connections.clear()
            self.acks.clear()
            self.sent.clear()
            self.handshakes.clear()

    def new_url(self) -> str:
        ticket = str(uuid.uuid4())
        self._tickets[ticket] = False
        return f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={APP_ID}"

    # --- what tests do ------------------------------------------------------------------------

    def wait_connected(self, timeout: float = 60) -> Connection:
        """The newest open connection not told to go away. A retiring one is hung up as soon as
        its successor has shaken hands: an envelope sent on it in between would be lost."""
        def live() -> list[Connection]:
            return [c for c in self._connections if c.open and not c.retiring]

        with self._changed:
            if not self._changed.wait_for(live, timeout):
                raise TimeoutError(f"no Socket Mode client connected within {timeout} s")
            return live()[-1]

    def wait_ack(self, envelope_id: str, timeout: float = 10) -> dict[str, Any]:
        with self._changed:
            found = self._changed.wait_for(lambda: self._ack(envelope_id), timeout)
            if not found:
                raise TimeoutError(f"envelope {envelope_id} was not acknowledged within {timeout} s")
            return found

    def deliver(self, kind: str, payload: dict[str, Any], *, accepts_response_payload: bool = False,
                retry_attempt: int | None = None) -> str:
        """Send one envelope to the newest open connection; returns its envelope_id."""
        envelope: dict[str, Any] = {"envelope_id": str(uuid.uuid4()), "payload": payload, "type": kind,
                                    "accepts_response_payload": accepts_response_payload}
        if retry_attempt is not None:
            envelope.update(retry_attempt=retry_attempt, retry_reason="timeout" if retry_attempt else "")
        self.wait_connected().send_json(envelope)
        with self._changed:
            self.sent.append(envelope)
        return envelope["envelope_id"]

    def events_api(self, event: dict[str, Any]) -> str:
        """An Events API event (app_mention, message.im ...) wrapped as Slack wraps it."""
        now = int(time.time())
        payload = {
            "token": "verification-token", "team_id": TEAM_ID, "api_app_id": APP_ID, "event": event,
            "type": "event_callback", "event_id": "Ev" + uuid.uuid4().hex[:10].upper(), "event_time": now,
            "authorizations": [{"enterprise_id": None, "team_id": TEAM_ID, "user_id": BOT_USER_ID,
                                "is_bot": True, "is_enterprise_install": False}],
            "is_ext_shared_channel": False, "event_context": "4-" + uuid.uuid4().hex,
        }
        return self.deliver("events_api", payload, retry_attempt=0)

    def slash_command(self, command: str, text: str, *, user_id: str, channel_id: str) -> str:
        payload = {
            "token": "verification-token", "team_id": TEAM_ID, "team_domain": "crashcart-test",
            "channel_id": channel_id, "channel_name": "oncall", "user_id": user_id, "user_name": user_id.lower(),
            "command": command, "text": text, "api_app_id": APP_ID, "is_enterprise_install": "false",
            "response_url": self.api.response_url("commands-" + uuid.uuid4().hex[:8]),
            "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
        }
        return self.deliver("slash_commands", payload, accepts_response_payload=True)

    def interactive(self, payload: dict[str, Any]) -> str:
        """A block_actions (or other interactive) payload, as its caller built it."""
        return self.deliver("interactive", payload, accepts_response_payload=payload.get("type") != "block_actions")

    def disconnect(self, reason: str = "warning") -> None:
        """Slack's notice before it closes a connection: the client opens a new one, then this
        one is hung up (Slack closes it a few seconds later)."""
        conn = self.wait_connected()
        conn.retiring = True
        conn.send_json({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-crashcart-test"}})

    # --- the server side ----------------------------------------------------------------------

    def _ack(self, envelope_id: str) -> dict[str, Any] | None:
        return next((a for a in self.acks if a.get("envelope_id") == envelope_id), None)

    def _accept_loop(self) -> None:
        while self._running:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self._spawn(self._serve, sock, name="slack-socket-conn")

    def _serve(self, sock: socket.socket) -> None:
        conn = Connection(sock)
        self._accepted.append(conn)
        if not self._running:  # stop() ran between the accept and here
            conn.close()
        try:
            if not self._handshake(conn):
                return
            with self._changed:
                retiring = [c for c in self._connections if c.retiring and c.open]
                self._connections.append(conn)
                self._changed.notify_all()
            for old in retiring:
                old.close()
            conn.send_json({"type": "hello", "num_connections": len([c for c in self._connections if c.open]),
                            "debug_info": {"host": "applink-crashcart-test", "build_number": 1,
                                           "approximate_connection_time": 18060},
                            "connection_info": {"app_id": APP_ID}})
            self._read_loop(conn)
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()
            with self._changed:
                self._changed.notify_all()

    def _handshake(self, conn: Connection) -> bool:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.sock.recv(4096)
            if not chunk:
                return False
            request += chunk
        lines = request.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        ticket = (parse_qs(urlparse(path).query).get("ticket") or [""])[0]
        if self._tickets.get(ticket, True):  # unknown or already used
            conn.sock.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return False
        self._tickets[ticket] = True
        accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + WS_GUID).encode()).digest()).decode()
        conn.sock.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())
        self.handshakes.append(path)
        return True

    def _read_loop(self, conn: Connection) -> None:
        while conn.open:
            opcode, data = conn.read_frame()
            if opcode == OP_PING:
                conn.send(OP_PONG, data)
            elif opcode == OP_CLOSE:
                conn.send(OP_CLOSE, data[:2])
                return
            elif opcode == OP_TEXT:
                message = json.loads(data.decode("utf-8"))
                with self._changed:
                    if "envelope_id" in message:
                        self.acks.append(message)
                    self._changed.notify_all()


__all__ = ["SlackSocketServer", "BOT_ID", "BOT_USER_ID", "TEAM_ID", "APP_ID"]
