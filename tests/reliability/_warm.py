"""Imported once by the fork server of procs.py: what every crashcart process loads the same
way (the playbooks, compiled patterns) is loaded there once, not in each child."""

from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.agent.runner import _in_memory_graph

PlaybookPolicy()
_in_memory_graph()
