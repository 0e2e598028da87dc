"""The trainer's actor: a Ray (or in-process) actor body around `dora.exec.trainer.Trainer`,
with the checkpoint save / resume / re-train calls the executor's recovery uses. With world > 1
it is one rank of `dora.exec.trainer_group.TrainerGroup`: its Trainer is built once it has
joined the group (`join`); every rank answers every call, rank 0 alone writes files."""

from __future__ import annotations

import os
import time
from pathlib import Path


RESUME_READS = 5  # reads of a checkpoint that keeps being replaced under the reader before giving up


def _dir_id(d: Path) -> tuple[int, int, int] | None:
    """(device, inode, mtime) of a directory: a save renames a new directory over the old one."""
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


class TrainerActor:
    """Ray actor body around dora.exec.trainer.Trainer."""

    def __init__(self, model: str, cfg, out: str, rank: int = 0, world: int = 1):
        self.model, self.cfg, self.out = model, cfg, Path(out)
        self.rank, self.world = rank, world
        self._trainer = None
        if world == 1:
            self._build()

    def _build(self) -> None:
        from dora.exec.trainer import Trainer

        self._trainer = Trainer(self.model, self.cfg)

    @property
    def trainer(self):
        if self._trainer is None:
            raise RuntimeError(f"trainer rank {self.rank}/{self.world}: not in its process group (join failed)")
        return self._trainer

    def address(self) -> str:
        """Rank 0: where the group meets (a free port on this node)."""
        from dora.exec.trainer_group import free_address

        return free_address()

    def join(self, address: str) -> str:
        """Join the group at rank 0's address, then build this rank's Trainer (FSDP2); the backend."""
        from dora.exec.trainer_group import join_group

        backend = join_group(address, self.rank, self.world, self.cfg.device)
        self._build()
        return backend

    def step(self, batch) -> dict:
        return self.trainer.step(batch)

    def weights(self) -> dict:
        """The full weights at rank 0 (gathered from every rank's shard); {} at the others."""
        state = self.trainer.state_dict_for_publish()
        return state if self.rank == 0 else {}

    def close(self) -> None:
        """Killed in-process (dora.exec.local_runtime): the weight-sync group and store go, as with
        the process on Ray."""
        sender = getattr(self, "_wsender", None)
        if sender is not None:
            sender.close()

    def version_held(self) -> int:
        """The version this trainer's weights are at (a cheap call: answered only by a live trainer)."""
        return int(self.trainer.version)

    def weight_sync_address(self, backend: str = "auto") -> dict:
        """Collective weight sync: host, port and backend of this process's store (dora.exec.weight_sync)."""
        return self._weight_sender(backend).address()

    def broadcast_weights(self, spec: dict, version: int, dtype: str = "") -> dict:
        """Collective weight sync: send `version` (the current weights, packed once per version in
        `dtype`, default their own) as rank 0 of group `spec`. Returns {version, bytes, seconds};
        the other trainer ranks take part in gathering a new version and return {}."""
        import torch

        dt = getattr(torch, dtype) if dtype else None
        if self.rank != 0:
            # FSDP: the gather rank 0's sender makes when it packs a new version needs every rank
            if getattr(self, "_gathered", -1) != version and self.trainer.version == version:
                self.trainer.state_dict_for_publish(dtype=dt)
                self._gathered = version
            return {}
        return self._weight_sender(spec["backend"]).broadcast(
            spec, version, self.trainer.version, lambda: self.trainer.state_dict_for_publish(dtype=dt).items())

    def _weight_sender(self, backend: str):
        from dora.exec.weight_sync import WeightSender

        sender = getattr(self, "_wsender", None)
        if sender is None:
            sender = self._wsender = WeightSender(backend, str(self.trainer.device))
        return sender

    def save_weights(self, version: int) -> str:
        return str(self.trainer.save_weights(self.out / "weights" / f"v{version}"))

    def save_checkpoint(self, data_state: dict | None = None) -> str:
        return str(self.trainer.save_checkpoint(self.out / "checkpoint", data_state=data_state))

    def resume(self) -> dict:
        """Load the last checkpoint if there is one; its data-consumption state (version 0 and
        nothing trained when there is none: the trainer starts from the model itself). A checkpoint
        replaced while it is read (a save of the trainer this one replaces, landing late) is read
        again, so weights, optimizer and data state all come from one save."""
        from dora.exec.trainer import latest_checkpoint, read_data_state

        for _ in range(RESUME_READS):
            ckpt = latest_checkpoint(self.out / "checkpoint")
            if ckpt is None:
                return {"version": 0, "trained_groups": []}
            before = _dir_id(ckpt)
            try:
                self.trainer.load_checkpoint(ckpt)
                state = read_data_state(ckpt)
            except Exception:
                if _dir_id(ckpt) == before:
                    raise
                continue
            if _dir_id(ckpt) != before:
                continue  # replaced (or removed) under the read
            if state.get("version") != self.trainer.version:
                raise RuntimeError(f"checkpoint {ckpt}: data state of version {state.get('version')} beside "
                                   f"trainer version {self.trainer.version}")
            return state
        raise RuntimeError(f"checkpoint {self.out / 'checkpoint'}: replaced while read, {RESUME_READS} times")

    def resume_and_step(self, batches: dict[int, list], step: int) -> tuple[dict, dict]:
        """After a restart: load the last checkpoint (version c), re-train the batches of steps
        c+1..step-1 in order (their versions were published already), then train `step`'s batch.
        `batches` holds every step's batch the checkpoint may be missing. Returns the step's
        stats and {checkpoint, replayed, trained_groups (the checkpoint's), resume_s}."""
        t0 = time.perf_counter()
        state = self.resume()
        ckpt = int(state["version"])
        for v in range(ckpt + 1, step):
            self.trainer.step(batches[v])
        info = {"checkpoint": ckpt, "replayed": step - 1 - ckpt, "trained_groups": state["trained_groups"],
                "resume_s": time.perf_counter() - t0}
        return self.trainer.step(batches[step]), info
