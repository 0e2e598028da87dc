"""How far a cautious remaining-length estimate has run short where it mattered, learned from its bets.

A decision that must not make the trainer wait (dora's consolidation) bets that each moved
trajectory makes at most its cautious remainder (the 90th percentile of the lengths seen beyond
what it has made) and finishes by its version's deadline. A bet that ran past its remainder
but finished in time cost nothing; one that finished late and past its remainder is what the
remainder should have foreseen. `factor()` is the multiplier the bets would have needed: the
q-quantile, over the last `window` settled bets, of actual / predicted remainder for a bet that
finished after its deadline (0 for one in time), together with the open bets already past both
deadline and prediction (their ratio so far, a lower bound: the longest bets finish last).
Between 1 and `cap`, and 1 until `min_settled` bets are settled. Only observed quantities enter:
what the scheduler predicted, its progress estimate, event times and the lengths bodies report.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class RemainderCalibration:
    def __init__(self, q: float = 0.9, window: int = 64, min_settled: int = 10, cap: float = 1.5) -> None:
        self.q = q
        self.cap = cap
        self.min_settled = min_settled
        self.open: dict[int, tuple[float, float, float]] = {}  # trajectory -> (made, predicted, deadline)
        self.ratios: deque[float] = deque(maxlen=window)  # finished bets: actual / predicted remainder if late, else 0

    def bet(self, traj: int, made: float, predicted: float, deadline: float) -> None:
        """`traj`, having made `made` tokens, is predicted to make at most `predicted` more, and
        must finish by `deadline`."""
        self.open[traj] = (made, max(predicted, 1.0), deadline)

    def settle(self, traj: int, tokens: int, now: float) -> None:
        """`traj` finished at `now` with `tokens` tokens in all."""
        b = self.open.pop(traj, None)
        if b is not None:
            self.ratios.append(max(tokens - b[0], 0.0) / b[1] if now > b[2] else 0.0)

    def drop(self, traj: int) -> None:
        """`traj` left without finishing (aborted, lost): its bet is void."""
        self.open.pop(traj, None)

    def factor(self, made: Callable[[int], float], now: float) -> float:
        """The multiplier the cautious remainders needed (>= 1); `made(traj)`: tokens an open bet's
        trajectory has made by `now`."""
        r = list(self.ratios)
        for t, (m0, p, dl) in self.open.items():
            if now > dl:
                x = (made(t) - m0) / p
                if x > 1.0:
                    r.append(x)
        if len(r) < self.min_settled:
            return 1.0
        r.sort()
        return min(self.cap, max(1.0, r[min(int(self.q * len(r)), len(r) - 1)]))
