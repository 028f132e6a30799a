"""Bolt's request verification, journaling what it refuses.

It is Bolt's own RequestVerification (slack_sdk's SignatureVerifier: HMAC-SHA256 over
`v0:timestamp:body` with the signing secret, the timestamp within five minutes), placed where
Bolt places its own (before authorization and every listener). A request that fails gets
Bolt's 401 and never reaches a listener; a click among them is also written to
approval_attempts, so a forged or replayed-late approval leaves a trace.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from slack_bolt.middleware.request_verification import RequestVerification
from slack_bolt.request import BoltRequest
from slack_bolt.response import BoltResponse

MAX_SKEW_S = 60 * 5


class JournaledRequestVerification(RequestVerification):
    def __init__(self, signing_secret: str, on_refused: Callable[[dict[str, Any], str], None]):
        super().__init__(signing_secret)
        self.on_refused = on_refused

    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse:
        if self._can_skip(req.mode, req.body):
            return next()
        timestamp = req.headers.get("x-slack-request-timestamp", ["0"])[0]
        signature = req.headers.get("x-slack-signature", [""])[0]
        if self.verifier.is_valid(req.raw_body, timestamp, signature):
            return next()
        self.on_refused(req.body if isinstance(req.body, dict) else {}, _why(timestamp))
        return self._build_error_response()


def _why(timestamp: str) -> str:
    try:
        skew = abs(time.time() - int(timestamp))
    except ValueError:
        return "the request carried no usable X-Slack-Request-Timestamp"
    if skew > MAX_SKEW_S:
        return f"the request's timestamp is {skew:.0f} s from now (more than five minutes): stale or replayed"
    return "the request's X-Slack-Signature does not verify with the signing secret"
