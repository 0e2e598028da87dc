"""Order of simulator events due at the same instant (the `kind` of a scheduled call).

SimPy pops its queue by (time, priority, id); the cluster's schedulers set priority =
kind · stride + instance, so at one instant every instance's step boundaries (finishes) come
first, then re-plans, then arrivals, then the trainer, then injected faults; within a kind,
lower instance ids first (the trainer's and the cluster's own calls last)."""

from __future__ import annotations

from typing import Final

BOUNDARY: Final = 0  # an instance's decode-step boundary: finishes, joins (Instance's own heap)
REPLAN: Final = 1  # an instance re-plans its batch after a change at this instant
ARRIVAL: Final = 2  # something reaches an instance or the policy: a migrated trajectory, a result, a
#                     tool's answer, the end of a weight load or pause
TRAINER: Final = 3  # the trainer: a step's end, a publication, a crash, a colocated step's start
FAULT: Final = 4  # an injected instance failure or repair
