"""What a version's own trajectories say about a remaining-length estimate: finished lengths
and the tokens the still-running ones have made (right-censored lengths).

The length history (`LengthPredictor`) holds finished lengths only. Early in a run, or on a
trace whose long answers have not had time to finish, it holds the short ones: every
trajectory longer than anything finished is still running. A cautious remainder read from
that history (the 90th percentile of the lengths seen beyond what a trajectory has made) can
then end before the point that a tenth of the version's longer trajectories have already
passed. `floor(version, g)` is that point: the tokens made by the k-th furthest running
trajectory of the version, k just over a tenth of those known to be longer than g (finished
beyond g, or running at g or beyond); 0 when too few run. A remainder ending below it is
refuted by the version's own trajectories.

The running trajectories' progress is sampled (at most `sample` of them, every `stride`-th,
counts scaled back) and refreshed at most every `refresh_s` simulated seconds; the finished
lengths are kept whole, per version, until `drop_before` forgets old versions.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable


class VersionCohorts:
    def __init__(self, share: float = 0.1, sample: int = 2048, refresh_s: float = 1.0) -> None:
        self.share = share  # the share of the longer trajectories a remainder must not end before
        self.sample = sample
        self.refresh_s = refresh_s
        self.fin: dict[int, list[int]] = {}  # version -> finished lengths (sorted up to n_sorted at the last refresh)
        self.n_sorted: dict[int, int] = {}
        self.made: dict[int, list[float]] = {}  # version -> sampled tokens made by its running trajectories, sorted
        self.stride: dict[int, int] = {}  # version -> one running trajectory in `stride` sampled
        self.at: dict[int, float] = {}  # version -> time of its last refresh

    def finish(self, version: int, tokens: int) -> None:
        f = self.fin.get(version)
        if f is None:
            self.fin[version] = [tokens]
        else:
            f.append(tokens)

    def drop_before(self, version: int) -> None:
        for d in (self.fin, self.n_sorted, self.made, self.stride, self.at):
            for v in [v for v in d if v < version]:
                del d[v]

    def stale(self, version: int, now: float) -> bool:
        return now - self.at.get(version, -1e300) > self.refresh_s

    def refresh(self, version: int, now: float, running: list[int], made: Callable[[int], float]) -> None:
        """`running`: the version's running trajectories; `made(t)`: tokens `t` has made by `now`."""
        stride = max(1, -(-len(running) // self.sample))
        self.made[version] = sorted([made(t) for t in running[::stride]])
        self.stride[version] = stride
        f = self.fin.setdefault(version, [])
        f.sort()  # sorted before, new lengths appended: one merge
        self.n_sorted[version] = len(f)
        self.at[version] = now

    def floor(self, version: int, g: float) -> float:
        """Tokens that more than a `share` of the version's trajectories longer than `g` have
        already passed while still running, as of the last refresh (0 if none is known)."""
        run = self.made.get(version)
        if not run:
            return 0.0
        w = self.stride[version]
        nf = self.n_sorted[version]
        longer = nf - bisect_right(self.fin[version], g, 0, nf) + (len(run) - bisect_left(run, g)) * w
        k = int(self.share * longer / w) + 1
        if k > len(run):
            return 0.0
        x = run[len(run) - k]
        return x if x >= g else 0.0  # the k furthest include some not yet at g: too few run past it
