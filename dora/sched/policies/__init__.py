"""Scheduling policies, one per file; `POLICIES` maps names to classes."""

from dora.sched.policies.dora import DoraPolicy
from dora.sched.policies.laminar import LaminarPolicy
from dora.sched.policies.one_step import OneStepPolicy
from dora.sched.policies.partial import PartialPolicy
from dora.sched.policies.sync import SyncPolicy

POLICIES = {p.name: p for p in (SyncPolicy, OneStepPolicy, PartialPolicy, LaminarPolicy, DoraPolicy)}

__all__ = ["POLICIES", "SyncPolicy", "OneStepPolicy", "PartialPolicy", "LaminarPolicy", "DoraPolicy"]
