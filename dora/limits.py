"""Upper bounds from what this machine can hold: a run whose estimated memory or time is over
the limit is refused before it starts, with the estimate and the limit.

Limits: 80% of the machine's physical memory (`DORA_MEMORY_LIMIT_GIB` sets another) and two hours
of wall time (`DORA_TIME_LIMIT_S`). The estimates are per command (the simulator's from its event
count and instances, the trace generator's from its rows); they aim high, not exact.
"""

from __future__ import annotations

import os

from dora.errors import InputError

SHARE = 0.8  # of physical memory
GIB = 2.0 ** 30


def physical_memory() -> int:
    """Bytes of physical memory (sysconf; 16 GiB where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (OSError, ValueError, AttributeError):  # not a POSIX system that reports it
        return int(16 * GIB)


TIME_LIMIT_S = 2 * 3600.0


def _env_limit(name: str) -> float | None:
    """A positive number from the environment variable `name`, None when unset."""
    env = os.environ.get(name, "").strip()
    if not env:
        return None
    try:
        v = float(env)
    except ValueError:
        v = float("nan")
    if not 0 < v < float("inf"):
        raise InputError(f"{name}={env!r}: must be a positive number; unset it or fix it")
    return v


def memory_limit() -> int:
    """Bytes a run may plan to use: DORA_MEMORY_LIMIT_GIB if set, else SHARE of physical memory."""
    gib = _env_limit("DORA_MEMORY_LIMIT_GIB")
    return int(gib * GIB) if gib is not None else int(physical_memory() * SHARE)


def check_time(what: str, estimate_s: float, fix: str) -> None:
    """InputError '<what>: would run about X h, over the limit of Y h; <fix>' when over."""
    limit = _env_limit("DORA_TIME_LIMIT_S") or TIME_LIMIT_S
    if estimate_s > limit:
        raise InputError(f"{what}: would run about {estimate_s / 3600:,.2f} h, over the limit of {limit / 3600:,.2f} h "
                         f"(DORA_TIME_LIMIT_S sets another); {fix}")


def check_memory(what: str, estimate: float, fix: str) -> None:
    """InputError '<what>: needs about X GiB ..., over the limit of Y GiB; <fix>' when over."""
    limit = memory_limit()
    if estimate > limit:
        raise InputError(f"{what}: needs about {estimate / GIB:,.1f} GiB of memory, over this machine's limit of "
                         f"{limit / GIB:,.1f} GiB (80% of its memory, or DORA_MEMORY_LIMIT_GIB); {fix}")
