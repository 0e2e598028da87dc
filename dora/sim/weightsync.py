"""How a published version reaches the rollout instances (disaggregated placements).

- `pull` (default): each instance fetches the version from the trainer's store when the
  policy loads it, in `weight_load_s`. With `pull_streams` = S > 0 the store serves at most
  S copies at once (its egress over one instance's ingress, e.g. trainer devices / devices
  per instance when both sides have one NIC per device); later loads queue for a stream.
- `broadcast`: at every publication the trainer broadcasts the version to all live rollout
  instances in one collective with a barrier (verl/OpenRLHF-style NCCL broadcast): each
  instance stops decoding at its next step boundary for `weight_load_s + broadcast_level_s
  * ceil(log2(instances + 1))` (bandwidth term of a pipelined broadcast plus one latency per
  tree level) and stages the version; a later load of a staged version is a local swap,
  `swap_s`. Instances that missed the broadcast (down at the time) fetch it as in `pull`.
- `relay` (Laminar): the trainer hands the version to a chain of relay workers (host memory,
  one per `relay_fanout` instances) that forward it pipelined, without stopping rollout;
  relay r holds it `weight_load_s + r * relay_hop_s` after the publication and an instance
  loads it from its relay in `relay_local_s` (host to device), waiting first if its relay
  does not hold it yet.

Colocated placements (sync on the trainer's devices) and elastic instances reshard on the
same devices (`colocated_reshard_s`) under every topology.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Literal

from dora.errors import too_small
from dora.sim.cost import CostModel


@dataclass
class WeightSyncConfig:
    topology: Literal["pull", "broadcast", "relay"] = "pull"
    pull_streams: int = 0  # pull: copies the store serves at once (0: unlimited)
    broadcast_level_s: float = 0.001  # broadcast: latency per level of the broadcast tree
    swap_s: float = 0.02  # broadcast: staged copy -> serving weights (on-device copy, H800 x2 30B-A3B: 61 GB / 3.35 TB/s)
    relay_fanout: int = 8  # relay: instances served by one relay worker (one node of 8 devices x 1)
    relay_hop_s: float = 0.05  # relay: pipelining delay per relay down the chain
    relay_local_s: float = 0.55  # relay: host -> device load of a version (61 GB over 2 x PCIe Gen5 ~55 GB/s)

    def validate(self) -> None:
        if self.pull_streams < 0:
            raise too_small("pull_streams", self.pull_streams, 0, "(0 = unlimited)")
        for name in ("broadcast_level_s", "swap_s", "relay_hop_s", "relay_local_s"):
            if not getattr(self, name) >= 0:
                raise too_small(name, getattr(self, name), 0, "seconds")
        if self.relay_fanout < 1:
            raise too_small("relay_fanout", self.relay_fanout, 1, "instance per relay")


class WeightSync:
    """Load durations and broadcast pauses for one run."""

    def __init__(self, cfg: WeightSyncConfig, cost: CostModel, rollout_instances: int):
        self.cfg = cfg
        self.cost = cost
        self.n = rollout_instances
        self.published: dict[int, float] = {0: 0.0}  # version -> publication time
        self.staged: dict[int, int] = {}  # instance -> newest version received by broadcast
        self._streams: list[float] = [0.0] * cfg.pull_streams  # pull: when each store stream frees up
        heapq.heapify(self._streams)

    def broadcast_s(self) -> float:
        return self.cost.weight_load_s + self.cfg.broadcast_level_s * math.ceil(math.log2(self.n + 1))

    def on_publish(self, version: int, now: float) -> float:
        """Record a publication; returns the barrier pause every live instance takes (0: none)."""
        self.published[version] = now
        return self.broadcast_s() if self.cfg.topology == "broadcast" else 0.0

    def on_staged(self, instance: int, version: int) -> None:
        self.staged[instance] = max(version, self.staged.get(instance, -1))

    def forget(self, instance: int) -> None:
        """The instance failed: its staged copy is gone."""
        self.staged.pop(instance, None)

    def load_s(self, instance: int, version: int, now: float) -> float:
        """Seconds from a load request at `now` until `version` serves on `instance`."""
        c = self.cfg
        if c.topology == "broadcast" and self.staged.get(instance, -1) >= version:
            return c.swap_s
        if c.topology == "relay":
            avail = self.published.get(version, now) + self.cost.weight_load_s + (instance // c.relay_fanout) * c.relay_hop_s
            return max(avail - now, 0.0) + c.relay_local_s
        if c.pull_streams:
            free = heapq.heappop(self._streams)
            start = max(free, now)
            heapq.heappush(self._streams, start + self.cost.weight_load_s)
            return start - now + self.cost.weight_load_s
        return self.cost.weight_load_s
