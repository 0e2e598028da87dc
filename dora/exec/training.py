"""The executor's trainer side, beside its rollout side (`dora.exec.rollout`): a `Train`
action becomes a batch of rewarded trajectories for the trainer actor; its return publishes the
new version (tensors through the object store, a checkpoint directory, or a collective broadcast
to the engines: `dora.exec.collective`), writes the step's
rows and checkpoints, and delivers VersionPublished. A mixin of the orchestrator: it reads and
writes the orchestrator's state.
"""

from __future__ import annotations

import sys

from dora.body import train_rows, trainer_row
from dora.sched import actions as A
from dora.sched import events as E


class Training:
    """Trainer-side translation for `Orchestrator` (which defines every attribute used here)."""

    def _train(self, a: A.Train, now: float) -> None:
        from dora.exec.trainer import Trajectory

        batch, rows, consumed = [], [], []
        for traj in a.trajs:
            t, r, t_fin = self.finished.pop(traj)
            pid = t.prompt_id
            ex = self.examples[self.example_of[pid]]
            text = self.tok.decode(r.token_ids, skip_special_tokens=True)
            reward = float(self.reward_fn(text, ex.answer))
            gen_version = r.versions[0] if r.versions else r.version
            batch.append(Trajectory(list(r.prompt_ids), list(r.token_ids), list(r.logprobs), gen_version, pid, reward,
                                    trajectory_id=traj, finish_reason=r.finish_reason))
            consumed.append((traj, pid, gen_version, len(r.prompt_ids) + len(r.token_ids), len(r.token_ids)))
            rows.append({"prompt_id": pid, "sample_idx": t.sample_idx, "prompt_len": len(r.prompt_ids),
                         "response_len": len(r.token_ids), "finish_reason": "length" if r.finish_reason == "length"
                         else "stop", "reward": reward, "version": gen_version, "instance": t.instance,
                         "t_start_s": t.t_dispatch, "t_end_s": t_fin, "step": self.drawn_at.get(pid, self.version)})
        tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in batch)
        train_rows(self.log, now, self.version, consumed, tokens)
        self.batches[self.version + 1] = batch
        self.trained_at[self.version + 1] = list(a.prompt_ids)
        why = self.trainer.dead_rank(self.dead_errors) if self.start_trainer is not None else ""
        if why:  # a rank died since the last step: a new group redoes this one from the last checkpoint
            self.train_job = (None, now, rows, tokens)
            self._restart_trainer(why)
            return
        self.train_job = (self.trainer.step.remote(batch), now, rows, tokens)
        self._inject_trainer_kill("step", self.version + 1)

    def _on_trained(self, stats: dict, t_start: float, rows: list[dict], tokens: int) -> None:
        now = self.now()
        if not self.republishing:  # (a step redone after its publication failed has its train_end row)
            trainer_row(self.log, now, "train_end", self.version, tokens=tokens, dur_s=now - t_start,
                        busy_s=now - t_start)
        self.version += 1
        self._inject_trainer_kill("publish", self.version)
        try:
            self._publish_weights()
        except Exception as e:  # noqa: BLE001 - the trainer died while publishing: restarted, else raised
            why = self._trainer_lost(e)
            if not why:
                raise
            self.version -= 1  # never published: a new trainer redoes the step and publishes it
            self.republishing = True
            self.train_job = (None, t_start, rows, tokens)
            self._restart_trainer(f"{why} while publishing version {self.version + 1}")
            return
        self.republishing = False
        for old in [v for v in self.weights if v < self.version - self.cfg.policy.eta - 1]:
            del self.weights[old]
        pub = self.now()
        trainer_row(self.log, pub, "publish", self.version, version=self.version, dur_s=pub - now)
        every = self.cfg.checkpoint_every
        if every > 0 and self.version % every == 0 and self.version < self.cfg.steps:
            # queued on the trainer before its next step; written to a temporary dir and renamed
            self.saves.append((self.trainer.save_checkpoint.remote(self.data_state()), self.version))
        self.trace_rows.extend(rows)
        step_s = pub - self.last_pub
        self.last_pub = pub
        row = {"step": self.version, "t_s": pub, "step_time_s": step_s, **{k: float(v) for k, v in stats.items()}}
        self.step_rows.append(row)
        if stats.get("skipped_updates", 0) > 0:  # said whether or not progress lines are on
            print(f"  [{self.name}] step {self.version}: {stats['skipped_updates']:.0f} minibatch update(s) skipped, "
                  "the gradient norm was not finite (inf/NaN); weights kept", file=sys.stderr, flush=True)
        if self.progress:
            from dora.metrics import compute_metrics

            bubble = compute_metrics(self.log.to_frame(), self.run_info)["bubble_ratio"]  # so far
            print(f"  [{self.name}] step {self.version}/{self.cfg.steps}  reward {stats.get('reward_mean', 0):.3f}  "
                  f"staleness {stats.get('staleness_mean', 0):.2f} (max {stats.get('staleness_max', 0):.0f})  "
                  f"resp {stats.get('response_len_mean', 0):.1f} tok  {len(rows) / max(step_s, 1e-9):.2f} samples/s  "
                  f"bubble {bubble:.2f}  "
                  f"wall {pub:.1f} s", file=sys.stderr, flush=True)
        if self.version < self.cfg.steps:
            self.deliver(E.VersionPublished(self.version))

    def _publish_weights(self) -> None:
        """Make `self.version` loadable by the engines, by the configured weight sync."""
        sync = self.cfg.rollout.weight_sync
        v = self.version
        if sync == "collective":
            self._publish_collective()  # broadcast to the engines, staged there
        elif sync == "tensors":
            ref = self.trainer.weights.remote()
            self.ray.wait([ref])
            # the object is the trainer's if the trainer still holds this version (a trainer that died
            # while gathering leaves an error in its place, which the engines would fail to load)
            held = self.ray.get(self.trainer.version_held.remote())
            if held != v:
                raise RuntimeError(f"weights of version {v}: the trainer holds version {held}")
            self.trainer.check()
            self.weights[v] = ref
        else:
            self.weights[v] = self.ray.get(self.trainer.save_weights.remote(v))
        self.pub_t[v] = self.now()

    def _inject_trainer_kill(self, during: str, version: int) -> None:
        """Fault injection: kill the trainer (every rank, or `faults.kill_trainer_rank`) if this is
        the step (`during` = step) or publication (publish) of `version` that `faults` names, or
        (catch_up) the first broadcast to a replacement engine, the trainer idle, before the step
        that publishes `version` or a later one."""
        f = self.faults
        due = version >= f.kill_trainer_at_step > 0 if during == "catch_up" else version == f.kill_trainer_at_step
        if not due or f.kill_trainer_during != during or self.killed_trainer:
            return
        self.killed_trainer = True
        if f.kill_trainer_rank < 0:
            self.trainer.kill()  # every rank
        else:
            self.trainer.kill_rank(f.kill_trainer_rank)

    def data_state(self) -> dict:
        """The driver's data-consumption state at the current version (saved with a checkpoint)."""
        v = self.policy.view
        return {"version": self.version, "next_draw": self.next_draw,
                "trained_groups": sorted(p for ver, ps in self.trained_at.items() if ver <= self.version for p in ps),
                "buffer": sorted(int(p) for p in v.buffer), "policy": self.name}
