"""What the model is shown: the backend's read tools, two of crashcart's own, and results as data.

Each schema is the tool's pydantic input model and its description (Contract 1); only the
incident's backend's tools are offered. Write tools are not offered during the investigation:
writes are planned in the conclusion and go through the guard like the playbook's.
Results are bounded and wrapped in a delimiter the model is told to read as data only.
"""

from __future__ import annotations

import re
from typing import Any

from crashcart.agent.policies.llm._conclusion import conclusion_schema
from crashcart.agent.policies.llm._messages import ToolDef
from crashcart.tools._spec import REGISTRY

CONCLUDE = "conclude"
PLAYBOOK_CANDIDATES = "playbook_candidates"
OWN_TOOLS = {CONCLUDE, PLAYBOOK_CANDIDATES}
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    # Pydantic titles are noise to a model; everything else (types, enums, descriptions) stays.
    if isinstance(schema, dict):
        return {k: _clean(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_clean(v) for v in schema]
    return schema


def tool_defs(backend: str) -> list[ToolDef]:
    defs = [ToolDef(s.name, s.description, _clean(s.input.model_json_schema()))
            for s in REGISTRY.for_backend(backend) if s.effect == "read"]
    defs.append(ToolDef(
        PLAYBOOK_CANDIDATES,
        "crashcart's runbook: the playbook labels whose signals match what the tools returned so far, "
        "each with its family, remedy and the investigation steps it names, the playbooks' own verdict "
        "and plan on this evidence, and the calls the playbooks would make next. Start here after the "
        "first reads; a verdict that disagrees with yours needs a person's approval.",
        {"type": "object", "properties": {}, "additionalProperties": False},
    ))
    defs.append(ToolDef(
        CONCLUDE,
        "End the investigation with your diagnosis and the write actions you propose (resubmit, "
        "node_drain, node_resume, cancel_job, escalate, notify: each with its arguments and a reason). "
        "Evidence lines must be copied exactly from tool results. Every action goes through the guard.",
        _clean(conclusion_schema()),
    ))
    return defs


def bound(text: str, limit: int) -> str:
    """Head and tail of a long text with what was cut said in the middle (errors sit at the end)."""
    if len(text) <= limit:
        return text
    head = text[: limit // 3]
    tail = text[-(limit - len(head)):]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut: narrow it with tail/grep ...]\n{tail}"


def as_data(text: str) -> str:
    # The closing delimiter cannot be forged from inside the data.
    return text.replace("</data", "<\\/data").replace("<data", "<\\data")


def render_result(tool: str, ok: bool, text: str, error: str | None, limit: int, seq: int | None = None) -> str:
    where = f' seq="{seq}"' if seq is not None else ""
    if not ok:
        return f'<tool_result tool="{as_data(tool[:64])}"{where} status="error">\n<data>\n{as_data(bound(error or "failed", limit))}\n</data>\n</tool_result>'
    return f'<tool_result tool="{tool}"{where} status="ok">\n<data>\n{as_data(bound(text, limit))}\n</data>\n</tool_result>'
