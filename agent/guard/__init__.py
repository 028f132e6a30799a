"""The guard (DESIGN.md, Contract 4): allow, dry-run, needs-approval or deny, journaled first."""

from crashcart.agent.guard._guard import ApprovalError, Decision, DecisionKind, Guard, Review
from crashcart.agent.guard._policy import (
    DEFAULT_POLICY_PATH,
    ApprovalSettings,
    ApprovalTier,
    Approver,
    BreakerSettings,
    Escalation,
    GuardError,
    GuardPolicy,
    PermissionRule,
    PolicyError,
    RestartBudget,
    canonical_policy,
    load_policy,
    other_policy_flags,
    policy_from_dict,
    policy_sha256,
    write_tools,
)

__all__ = [
    "DEFAULT_POLICY_PATH",
    "ApprovalError",
    "ApprovalSettings",
    "ApprovalTier",
    "Approver",
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
    "canonical_policy",

    "Review",
    "load_policy",
    "other_policy_flags",
    "policy_from_dict",
    "policy_sha256",
    "write_tools",
]
