"""Fixtures shared by the unit and integration tests (data lives in helpers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import dump


@pytest.fixture
def write_scenario(tmp_path: Path):
    """write_scenario("name.yaml", text_or_dict) -> the file's path (under tmp_path)."""

    def write(name: str, content: str | dict[str, Any] | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content if isinstance(content, str) else dump(content), encoding="utf-8")
        return path

    return write


@pytest.fixture(autouse=True)
def _block_real_models(request):
    """No test reaches a paid model by accident: requests to anything but loopback are refused
    unless the test is marked `allow_model_requests`."""
    from crashcart.agent.policies.llm import _messages

    saved = _messages.ALLOW_MODEL_REQUESTS
    _messages.ALLOW_MODEL_REQUESTS = request.node.get_closest_marker("allow_model_requests") is not None
    yield
    _messages.ALLOW_MODEL_REQUESTS = saved
