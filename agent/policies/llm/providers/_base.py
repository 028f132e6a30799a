"""What both SDK adapters share: the name, the lazily made client, and the key for a local server."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from crashcart.agent.policies.llm._messages import ModelError


class SDKModel:
    provider = ""
    key_env = ""
    public_host = ""

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float = 60.0, client: Any = None, stream: bool = False):
        self.name = f"{self.provider}:{model}"
        self.model = model
        self.stream = stream
        self.on_text: Callable[[str], None] | None = None
        """Called with each piece of a streamed answer's text as it arrives (a live view)."""
        self._client = client
        self._base_url, self._api_key, self._timeout = base_url, api_key, timeout_s

    def _key(self) -> str | None:
        # A local server needs no key, but the SDKs insist on one: give them a placeholder then.
        if self._api_key is None and self._base_url and self.public_host not in self._base_url:
            return os.environ.get(self.key_env) or "not-needed"
        if self._api_key is None and not os.environ.get(self.key_env):
            # Said here, once per request, instead of as each SDK's own exception (a TypeError in one).
            raise ModelError(f"no API key for {self.name}: set {self.key_env}, or api_key_env / api_key_file "
                             "in cluster.yaml's llm section", retriable=False)
        return self._api_key  # None: the SDK reads its own variable

    @property
    def client(self) -> Any:
        if self._client is None:
            # Retries are crashcart's (with its own budget and backoff), not the SDK's.
            self._client = self._make_client(self._key())
        return self._client

    def _make_client(self, key: str | None) -> Any:
        raise NotImplementedError
