"""The guard (DESIGN.md, Contract 4): allow, dry-run, needs-approval or deny, journaled first."""

from crashcart.agent.guard._guard import ApprovalError, Decision, DecisionKind, Guard, Review
from crashcart.agent.guard._policy import (
    DEFAULT_POLICY_PATH,
    ApprovalTier,
    BreakerSettings,
    Escalation,
    GuardError,
    GuardPolicy,
    PermissionRule,
    PolicyError,
    RestartBudget,
    load_policy,
    policy_from_dict,
)

__all__ = [
    "DEFAULT_POLICY_PATH",
    "ApprovalError",
    "ApprovalTier",
    "BreakerSettings",
    "Decision",
    "DecisionKind",
    "Escalation",
    "Guard",
    "GuardError",
    "GuardPolicy",
    "PermissionRule",
    "PolicyError",
    "RestartBudget",
    "Review",
    "load_policy",
    "policy_from_dict",
]
