"""The trainer's observed pace, and what holds it back: data (too few complete groups) or
late groups (B or more complete, but one that must be in the step is still running).

Everything here comes from events the scheduler sees: when a step starts (`train_started`),
when its weights publish (`published`), and the buffer's size whenever a group completes or
the trainer starts (`tick`). From these it keeps the trainer step time and the publication
interval (each averaged over steps) and the last version at which a late group held the
trainer. `deadline` turns them into a
predicted start of a future step.
"""

from __future__ import annotations


class TrainerPace:
    def __init__(self, eta: int, batch: int) -> None:
        self.eta = eta
        self.B = batch
        self.train_s = 0.0  # trainer step (start to publication), averaged over steps
        self.pace_s = 0.0  # publication interval, averaged over steps
        self.last_step_s = 0.0  # the last publication interval
        self.last_train_s = 0.0  # the last step, start to publication
        self.waited_s = -1.0  # how long the trainer waited since the last publication before this step (-1: the first)
        self.t0 = 0.0  # start of the current (or last) step
        self._last_pub = 0.0
        self._published = False  # a version has been published
        self._idle_t = 0.0  # idle time is looked at up to here
        self.blocked_at = 0  # trainer version when a late group last held the trainer (0: never)

    def tick(self, now: float, busy: bool, buffered: int, version: int) -> None:
        """The trainer idled since the last tick with B or more complete groups (`buffered`, in
        the buffer during the interval): a late group held it at `version`."""
        if not busy and buffered >= self.B and now > self._idle_t:
            self.blocked_at = version
        self._idle_t = now

    def train_started(self, now: float) -> None:
        self.waited_s = now - self._last_pub if self._published else -1.0
        self.t0 = now

    def published(self, now: float) -> None:
        self._idle_t = now
        step = self.last_train_s = now - self.t0
        self.train_s = step if self.train_s == 0.0 else 0.5 * (self.train_s + step)
        self.last_step_s = now - self._last_pub
        self.pace_s = self.last_step_s if self.pace_s == 0.0 else 0.5 * (self.pace_s + self.last_step_s)
        self._last_pub = now
        self._published = True

    def data_bound(self, version: int) -> bool:
        """At neither of the last two trainer versions did a late group hold the trainer (and the
        first step has been observed): data, not the tails, paces it. Two versions, whatever η:
        one observed step after a hold; a window of η + 1 kept consolidation off for most of a
        run at large η (measured on the robustness grid, docs/dora_policy.md)."""
        return version - max(self.blocked_at, 1) > 1

    def deadline(self, version: int, now: float, trainer_version: int, busy: bool, paced: bool = False) -> float:
        """Predicted start of step `version` + η, the last that may train a group of `version`,
        were no group of `version` late. The k steps before it take at least the observed
        trainer step each (back to back, as when late groups hold the trainer), or the observed
        publication interval when data paces the trainer (`paced`)."""
        k = version + self.eta - (trainer_version + (1 if busy else 0))
        if k < 0:
            return now
        start = max(self.t0 + self.train_s, now) if busy else now
        step = self.train_s
        if paced and self.data_bound(trainer_version):
            step = max(step, self.pace_s)
        return start + k * step
