"""The failure knowledge base: one YAML playbook per family, validated on load."""

from crashcart.playbooks._loader import KnowledgeBase, PlaybookError, load_playbooks
from crashcart.playbooks._model import Change, Label, Playbook, Remedy, Signal, Step

__all__ = [
    "Change", "KnowledgeBase", "Label", "Playbook", "PlaybookError", "Remedy", "Signal", "Step",
    "load_playbooks",
]
