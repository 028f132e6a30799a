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
