"""Scheduling policies, one per file; `dora.sched.registry` makes them known by name."""
