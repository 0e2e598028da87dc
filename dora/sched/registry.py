"""The policy registry: every list of policies (CLI choices, default runs, plot colours, test
parametrisations, benchmarks) is read from here.

A policy is a `Policy` subclass with a `name`; if it has knobs of its own, a config dataclass
(with an optional `validate()`), whose fields become `policy.<name>.<field>` keys in YAML and
`--set`. One call makes it known to both bodies:

    register(MyPolicy, MyConfig)        # then: python -m dora.sim --policy my_policy ...

Registration order is display order (tables, plots). The five built-in policies are registered
below, in the order of the field's history: sync, one_step, partial, laminar, dora.
"""

from __future__ import annotations

from typing import Any

from dora.errors import InputError, too_small
from dora.sched.config import PolicyConfig
from dora.sched.policies.dora import DoraPolicy
from dora.sched.policies.dora_config import DoraConfig
from dora.sched.policies.laminar import LaminarPolicy
from dora.sched.policies.laminar_config import LaminarConfig
from dora.sched.policies.one_step import OneStepPolicy
from dora.sched.policies.partial import PartialPolicy
from dora.sched.policies.partial_config import PartialConfig
from dora.sched.policies.sync import SyncPolicy
from dora.sched.policies.sync_config import SyncConfig

POLICIES: dict[str, Any] = {}  # name -> Policy subclass, in registration order


def register(policy: Any, config: type | None = None) -> Any:
    """Make `policy` (a Policy subclass with a `name`) and its config dataclass known; returns it."""
    name = getattr(policy, "name", "")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"register: {policy!r} needs a `name` that is a Python identifier, got {name!r}")
    if name in POLICIES and POLICIES[name] is not policy:
        raise ValueError(f"register: a policy named {name!r} is registered already ({POLICIES[name].__name__})")
    if name in ("eta", "batch_size", "group_size", "sections"):
        raise ValueError(f"register: {name!r} is a shared policy knob, not a free policy name")
    POLICIES[name] = policy
    if config is not None:
        PolicyConfig.SECTION_TYPES[name] = config
    return policy


def unregister(name: str) -> None:
    """Forget a policy (tests that register one of their own)."""
    POLICIES.pop(name, None)
    PolicyConfig.SECTION_TYPES.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(POLICIES)


def check_run(policies: list[str], steps: int, pc: PolicyConfig) -> None:
    """Checks shared by both bodies' run configs: known policies, each once, enough steps, η for one_step."""
    if steps < 2:
        raise too_small("steps", steps, 2, "(steady-state metrics exclude the first step)")
    if not policies:
        raise InputError("policies: name at least one policy")
    for p in policies:
        if p not in POLICIES:
            raise InputError(f"policy {p!r}: unknown; choose from {', '.join(POLICIES)}")
    if len(set(policies)) != len(policies):
        raise InputError(f"policies: {policies} names a policy twice; list each policy once")
    if "one_step" in policies and pc.eta < 1:
        raise InputError("eta: one_step trains every batch one version late, so it needs eta >= 1; "
                         "pass --eta 1 or more, or leave one_step out")


register(SyncPolicy, SyncConfig)
register(OneStepPolicy)
register(PartialPolicy, PartialConfig)
register(LaminarPolicy, LaminarConfig)
register(DoraPolicy, DoraConfig)
