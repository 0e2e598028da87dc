"""Faults in the real executor: what to inject (for tests and demos) and how to recover.

- A rollout actor killed (`kill_instance_at_step`): once the trainer has published that
  version and instance `kill_instance` holds live trajectories, the driver kills its actor
  (`ray.kill`, or LocalRuntime.kill). The driver notices the death the way it would notice a
  real crash (the next call raises RayActorError / ActorDiedError): a `fail` row, a `lost`
  row per live trajectory, InstanceFailed and TrajectoryLost to the policy (as in the
  simulator), which regenerates the lost groups. With `restart_instances` a replacement
  actor starts, loads the newest published weights, and comes back (`recover` row,
  InstanceRecovered).
- The trainer killed during a step (`kill_trainer_at_step`: the step that would publish that
  version; every rank, or only rank `kill_trainer_rank`, whose peers then fail on their next
  collective or are found waiting on it), or as it publishes that version
  (`kill_trainer_during=publish`: the weights it gathers, saves or broadcasts never reach the
  engines), or while idle as it sends a replacement engine the newest version (`catch_up`, collective
  weight sync: the replacement waits for the next publication; the next step's start finds the
  trainer dead): the whole group is killed and a new trainer loads the
  last checkpoint (written every `checkpoint_every` steps with the driver's data-consumption
  state), re-trains the batches consumed since that checkpoint in order, then redoes the cut
  step on the same batch (`trainer_restart` row).
  Every group is trained exactly once in the surviving model's history.
- A weight load that fails (`load_fail_at`: [instance, version] pairs; each makes the next
  load attempt on that instance of that version or a later one fail: the driver sends it a
  copy of the weights whose last tensor is cut short, or with collective weight sync has it
  load such a copy of its staged version, so the real engine fails part-way through the load): a `load_fail` row and a retry with the intact weights, up to
  `load_retries` times per (instance, version), after which the instance is retired (killed,
  as a failure). The engine serves nothing between a failed load and a successful one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dora.errors import InputError, too_small


@dataclass
class FaultConfig:
    kill_instance_at_step: int = -1  # kill a rollout actor once this version is published (-1: never)
    kill_instance: int = 0  # which rollout instance
    restart_instances: bool = False  # start a replacement actor for a dead instance
    kill_trainer_at_step: int = -1  # kill the trainer during the step that publishes this version (-1: never)
    kill_trainer_rank: int = -1  # with kill_trainer_at_step: only this rank of trainer.ranks (-1: every rank)
    # with kill_trainer_at_step: during its compute, its publication, or (catch_up) as the idle trainer sends a
    # replacement engine the newest version, at the first such broadcast before that step or a later one
    kill_trainer_during: Literal["step", "publish", "catch_up"] = "step"
    load_fail_at: list[list[int]] = field(default_factory=list)  # [[instance, version], ...]: a load >= version fails
    load_retries: int = 2  # failed loads retried per (instance, version) before the instance is retired

    def validate(self) -> None:
        if self.kill_instance_at_step < -1:
            raise InputError(f"kill_instance_at_step: must be -1 (never) or a version >= 0, "
                             f"got {self.kill_instance_at_step}; set it to -1 or 0 or more")
        if self.kill_instance < 0:
            raise too_small("kill_instance", self.kill_instance, 0, "(an instance id)")
        if self.kill_trainer_at_step == 0 or self.kill_trainer_at_step < -1:
            raise InputError(f"kill_trainer_at_step: must be -1 (never) or a step >= 1, "
                             f"got {self.kill_trainer_at_step}; set it to -1 or 1 or more")
        if self.kill_trainer_rank < -1:
            raise InputError(f"kill_trainer_rank: must be -1 (every rank) or a rank >= 0, got "
                             f"{self.kill_trainer_rank}; set it to -1 or 0 or more")
        for k, item in enumerate(self.load_fail_at):
            if len(item) != 2 or item[0] < 0 or item[1] < 1:
                raise InputError(f"load_fail_at[{k}]: expected [instance >= 0, version >= 1], got {item!r}")
        if self.load_retries < 0:
            raise too_small("load_retries", self.load_retries, 0)

    def check_run(self, instances: int, steps: int, checkpoint_every: int, weight_sync: str,
                  ranks: int = 1) -> None:
        """Checks that need the rest of the run's configuration."""
        if self.kill_trainer_rank >= ranks:
            raise InputError(f"faults.kill_trainer_rank: rank {self.kill_trainer_rank} does not exist (trainer.ranks "
                             f"is {ranks}); use -1 (every rank) or 0..{ranks - 1}")
        if self.kill_instance_at_step >= 0:
            if self.kill_instance >= instances:
                raise InputError(f"faults.kill_instance: {self.kill_instance} does not exist (rollout.instances is "
                                 f"{instances}); use an id in 0..{instances - 1}")
            if self.kill_instance_at_step >= steps:
                raise InputError(f"faults.kill_instance_at_step: {self.kill_instance_at_step} is never reached in a "
                                 f"run of {steps} steps; use 0..{steps - 1}")
            if instances < 2 and not self.restart_instances:
                raise InputError("faults.kill_instance_at_step: killing the only rollout instance leaves none; use "
                                 "rollout.instances >= 2 or faults.restart_instances=true")
        if self.kill_trainer_at_step > steps:
            raise InputError(f"faults.kill_trainer_at_step: {self.kill_trainer_at_step} is never reached in a run "
                             f"of {steps} steps; use 1..{steps}")
        if self.kill_trainer_at_step > 0 and checkpoint_every < 1:
            raise InputError("faults.kill_trainer_at_step: the trainer resumes from its last checkpoint; set "
                             "checkpoint_every >= 1")
        if self.kill_trainer_at_step > 0 and self.kill_trainer_during == "catch_up" and not (
                weight_sync == "collective" and self.restart_instances and self.kill_instance_at_step >= 0):
            raise InputError("faults.kill_trainer_during: catch_up happens only when a replacement engine catches up "
                             "over collective weight sync; set rollout.weight_sync=collective, "
                             "faults.restart_instances=true and faults.kill_instance_at_step")
        for k, (inst, version) in enumerate(self.load_fail_at):
            if inst >= instances:
                raise InputError(f"faults.load_fail_at[{k}]: instance {inst} does not exist (rollout.instances is "
                                 f"{instances}); use an id in 0..{instances - 1}")
            if version > steps:
                raise InputError(f"faults.load_fail_at[{k}]: version {version} is never published in a run of "
                                 f"{steps} steps; use a version in 1..{steps}")
        if self.load_fail_at and weight_sync not in ("tensors", "collective"):
            raise InputError("faults.load_fail_at: injected load failures need rollout.weight_sync=tensors or "
                             "collective; set one, or drop faults.load_fail_at")

    def active(self) -> bool:
        return self.kill_instance_at_step >= 0 or self.kill_trainer_at_step > 0 or bool(self.load_fail_at)


def actor_errors(runtime) -> tuple[type[BaseException], ...]:
    """The exception types a call on a dead actor raises under this runtime (Ray or local)."""
    from dora.exec.local_runtime import ActorDiedError

    out: list[type[BaseException]] = [ActorDiedError]
    try:
        from ray.exceptions import RayActorError

        out.append(RayActorError)
    except ImportError:
        pass
    return tuple(out)


def cut_last_tensor(weights: dict) -> dict:
    """A copy of named tensors whose last tensor lost its last element (a transfer cut short)."""
    out = dict(weights)
    name = list(out)[-1]
    out[name] = out[name].reshape(-1)[:-1].clone()
    return out
