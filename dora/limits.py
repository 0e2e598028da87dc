"""Upper bounds from what this machine can hold: a run whose estimated memory is over the limit
is refused before it allocates, with the estimate and the limit.

The limit is 80% of the machine's physical memory (`DORA_MEMORY_LIMIT_GIB` sets another). The
estimates are per command (the simulator's from its event count, the trace generator's from its
rows); they aim high, not exact.
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


def memory_limit() -> int:
    """Bytes a run may plan to use: DORA_MEMORY_LIMIT_GIB if set, else SHARE of physical memory."""
    env = os.environ.get("DORA_MEMORY_LIMIT_GIB", "").strip()
    if env:
        try:
            gib = float(env)
        except ValueError:
            gib = float("nan")
        if not gib > 0 or gib == float("inf"):
            raise InputError(f"DORA_MEMORY_LIMIT_GIB={env!r}: must be a positive number of GiB; unset it or fix it")
        return int(gib * GIB)
    return int(physical_memory() * SHARE)


def check_memory(what: str, estimate: float, fix: str) -> None:
    """InputError '<what>: needs about X GiB ..., over the limit of Y GiB; <fix>' when over."""
    limit = memory_limit()
    if estimate > limit:
        raise InputError(f"{what}: needs about {estimate / GIB:,.1f} GiB of memory, over this machine's limit of "
                         f"{limit / GIB:,.1f} GiB (80% of its memory, or DORA_MEMORY_LIMIT_GIB); {fix}")
