"""Length and completion-time prediction from the run's own history (no oracle).

- A finished trajectory's length joins a sliding window of recent lengths (the running
  distribution) and its group's record (finished group-mates: lengths within a group are
  correlated because they share a prompt).
- predict_total(prompt_id, generated): with finished mates, their median (never below what
  is already generated); otherwise the running distribution's mean conditioned on being
  longer than `generated`, E[L | L > g].
- Progress is estimated, not observed: tokens ≈ elapsed × the per-sequence decode rate
  learned from finished trajectories on that instance (tokens / seconds since dispatch).
"""

from __future__ import annotations

import numpy as np


class LengthPredictor:
    def __init__(self, window: int = 4096, resort_every: int = 128, prior_len: float = 2048.0):
        self.window = window
        self._ring = np.zeros(window)  # the last `window` lengths (a ring), as of the last resort
        self._new: list[int] = []  # lengths seen since then (written to the ring at the next resort)
        self._count = 0  # lengths seen
        self._sorted = np.zeros(0)  # the window, sorted
        self._suffix = np.zeros(1)  # suffix sums of _sorted
        self.resort_every = resort_every
        self.prior_len = prior_len
        self.mates: dict[int, list[int]] = {}
        self.rate: dict[int, float] = {}  # instance -> tokens per second per sequence (EMA)
        self.global_rate = 0.0

    def observe(self, prompt_id: int, tokens: int, instance: int, elapsed_s: float) -> None:
        c = self._count
        new = self._new
        new.append(tokens)
        self._count = c + 1
        m = self.mates.get(prompt_id)
        if m is None:
            self.mates[prompt_id] = [tokens]
        else:
            m.append(tokens)
        if len(new) >= self.resort_every or c < 64:  # (len(_sorted) < 64 exactly while c < 64)
            self._resort()
        if elapsed_s > 0:
            r = tokens / elapsed_s
            old = self.rate.get(instance)
            self.rate[instance] = r if old is None else 0.8 * old + 0.2 * r
            self.global_rate = r if self.global_rate == 0 else 0.95 * self.global_rate + 0.05 * r

    def forget(self, prompt_id: int) -> None:
        self.mates.pop(prompt_id, None)

    def _resort(self) -> None:
        new, w = self._new[-self.window:], self.window
        if len(new) == 1:
            self._ring[(self._count - 1) % w] = new[0]
        else:
            first = self._count - len(new)
            self._ring[np.arange(first, self._count) % w] = new
        self._new.clear()
        a = self._ring[:min(self._count, w)].copy()
        a.sort()
        suf = np.zeros(len(a) + 1)
        suf[:-1] = np.cumsum(a[::-1])[::-1]
        self._sorted, self._suffix = a, suf

    def _above(self, generated: float) -> tuple[int, float]:
        """Index of the first length seen above `generated`, or -1 and the guess used instead
        (no history: the prior, or twice what was made; nothing seen longer: 1.5x + 1)."""
        n = len(self._sorted)
        if not n:
            return -1, max(self.prior_len, generated * 2.0)
        i = int(self._sorted.searchsorted(generated, side="right"))
        if i >= n:
            return -1, generated * 1.5 + 1.0
        return i, 0.0

    def count_above(self, generated: float) -> int:
        """Lengths in the window longer than `generated`."""
        i, _ = self._above(generated)
        return len(self._sorted) - i if i >= 0 else 0

    def conditional_mean(self, generated: float) -> float:
        """E[L | L > generated] over the running distribution."""
        i, guess = self._above(generated)
        return guess if i < 0 else float(self._suffix[i]) / (len(self._sorted) - i)

    def conditional_quantile(self, generated: float, q: float) -> float:
        """The q-quantile of L given L > generated over the running distribution (a cautious
        length for a decision that must hold in most cases; heavy tails give long ones)."""
        return self.quantile_and_count(generated, q)[0]

    def quantile_and_count(self, generated: float, q: float) -> tuple[float, int]:
        """`conditional_quantile` and `count_above` from one search of the window."""
        i, guess = self._above(generated)
        if i < 0:
            return guess, 0
        n = len(self._sorted)
        return float(self._sorted[min(i + int(q * (n - i)), n - 1)]), n - i

    def mates_median(self, prompt_id: int) -> float | None:
        """Median length of the finished group-mates (the upper one of an even count), or None."""
        m = self.mates.get(prompt_id)
        if not m:
            return None
        return float(sorted(m)[len(m) // 2])

    def predict_total(self, prompt_id: int, generated: float) -> float:
        m = self.mates.get(prompt_id)
        if m:  # (self.mates_median(prompt_id), inlined)
            return max(float(sorted(m)[len(m) // 2]), generated + 1.0)
        return self.conditional_mean(generated)

    def progress(self, instance: int, elapsed_s: float) -> float:
        r = self.rate.get(instance, self.global_rate)
        return r * elapsed_s if r > 0 else 0.0

    def predict_remaining(self, prompt_id: int, instance: int, elapsed_s: float) -> float:
        g = self.progress(instance, elapsed_s)
        return max(self.predict_total(prompt_id, g) - g, 1.0)
