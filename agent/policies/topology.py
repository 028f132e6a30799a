"""Which nodes share a rack or a switch, as their labels say (playbooks/settings/topology_labels.yaml).

One node whose links drop is a cable; several nodes of one rack whose links drop in the same
minutes is the rack's leaf switch. The job's own nodes rarely fill a rack, so when a fault shows on
two or more of them that share a rack or switch label, the other nodes carrying the same value are
where the same fault would show if it is the shared thing's: their kernel logs decide the scope.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator

from crashcart.agent.policies.evidence import Evidence
from crashcart.playbooks._loader import BUNDLED_DIR
from crashcart.tools.yamlio import DataFileError, read_model_file

TABLE_PATH = BUNDLED_DIR / "settings" / "topology_labels.yaml"


class TopologyKeys(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: list[str]
    """Regexes over a node label's key, each matched against the whole key."""

    @field_validator("keys")
    @classmethod
    def _compile(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one key pattern is needed")
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"key pattern {pattern!r} does not compile: {e}") from None
        return v

    def shared(self, labels: dict[str, str] | None) -> dict[str, str]:
        """The labels of a node that name a rack or a switch it shares with others."""
        return {k: str(v) for k, v in (labels or {}).items()
                if v not in (None, "") and any(re.fullmatch(p, k, re.I) for p in self.keys)}


class TopologyTableError(DataFileError):
    pass


@lru_cache(maxsize=4)
def load_topology_keys(path: str | None = None) -> TopologyKeys:
    return read_model_file(Path(path) if path else TABLE_PATH, TopologyKeys, TopologyTableError)


def rack_peers(suspects: list[str], ev: Evidence) -> list[str]:
    """Nodes of the node listing that carry a rack or switch label value at least two of the
    suspect nodes share, other than the suspects: listing order, nodes out of service included
    (a node drained by hand still logs its links)."""
    table = load_topology_keys()
    counts: dict[tuple[str, str], int] = {}
    for node in dict.fromkeys(suspects):
        for item in table.shared((ev.nodes.get(node) or {}).get("labels")).items():
            counts[item] = counts.get(item, 0) + 1
    common = {item for item, n in counts.items() if n >= 2}
    if not common:
        return []
    return [name for name, row in ev.nodes.items() if name not in suspects
            and common & set(table.shared(row.get("labels")).items())]
