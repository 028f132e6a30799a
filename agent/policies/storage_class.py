"""A claim's StorageClass that does not exist, replaced by one that does.

The provisioner says which class is missing (`storageclass.storage.k8s.io "x" not found`); what
exists is what jobs of the same namespace are running with right now: their claim of the same
name is bound with its class. One such class is the fix; none or several is the owner's choice.
"""

from __future__ import annotations

import re
from typing import Any

from crashcart.agent.policies.config_keys import load_key_table
from crashcart.agent.policies.evidence import Evidence
from crashcart.agent.policies.matching import _config_value

_MISSING = re.compile(r'storageclass\.storage\.k8s\.io "(?P<name>[^"]+)" not found', re.I)


def _claims(config: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The job's claim templates (claim name -> spec) and the key holding them. A config that
    spells them flat ("volumeClaimTemplates.ckpt.storageClassName") has no block to rewrite."""
    for key in load_key_table().settings["claim_templates"].keys:
        value = _config_value(config, key.key)
        if isinstance(value, dict):
            return key.key, value
    return None, {}


def storage_class_that_exists(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The job's claim templates with each missing class replaced by the one class running jobs of
    its namespace bind their claim of the same name with. None when a claim's class cannot be
    proven that way (no running peer has that claim, or they disagree)."""
    missing = {m["name"] for d in ev.docs if d.source == "events" for line in d.lines if (m := _MISSING.search(line))}
    _, claims = _claims(ev.configs.get(job, {}))
    if not missing or not claims:
        return None
    running = set(ev.running_peers())
    fixed = {}
    for name, spec in claims.items():
        if not isinstance(spec, dict) or spec.get("storageClassName") not in missing:
            fixed[name] = spec
            continue
        used = set()
        for peer, config in ev.configs.items():
            if peer in running:
                peer_spec = _claims(config)[1].get(name)
                if isinstance(peer_spec, dict) and peer_spec.get("storageClassName"):
                    used.add(str(peer_spec["storageClassName"]))
        used -= missing
        if len(used) != 1:
            return None
        fixed[name] = {**spec, "storageClassName": used.pop()}
    return fixed if fixed != claims else None
