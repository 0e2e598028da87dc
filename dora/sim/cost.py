"""Cost model: seconds for decode steps, prefill, KV transfer, weight loads, trainer steps.

One decode step of an instance running n sequences with total context Σctx and p tokens of
prefill (newly admitted sequences, whose first token comes out of the same step) costs

    f * (Σ_v [a + e*(1 - (1 - r)^n_v)] + b*n + c*Σctx + p*prefill_per_token_s)

summed over the policy versions v among the running sequences (each version is a separate
forward pass over its own weights; n_v of its sequences), with f the instance's slowdown
(MoE expert-parallel imbalance, 1.0 for dense models). a = decode_base_s reads the
non-expert weights; e = decode_expert_s is the time to read all routed-expert weights and
r = expert_touch the share of experts one token uses, so 1 - (1 - r)^n is the share a batch
of n tokens touches (MoE decode reads few experts for a lone long-tail sequence and nearly
all of them for a full batch; dense models have e = 0); b = decode_per_seq_s is the
per-token matmul compute; c = decode_per_ctx_token_s the attention cost per cached token.
For a run of k steps with fixed membership the decode part sums in closed form.

A finished trajectory's result reaches the policy request_latency_s after its last token
(submission, admission and result delivery outside the engine's steps: RPCs and the driver's
poll in a real executor; 0 by default, calibrated from a real run's request stamps).

A trainer step on T tokens over d devices takes train_base_s + train_device_s_per_token*T/d.
When the devices it trains on change (rollout instances lent to it or taken back), its next step
starts trainer_resize_s later.

Shared host (host_cores > 0; an executor whose engines and trainer share one machine's cores, as
on a CPU test box): while the trainer trains, it and the k engines that hold trajectories share
host_cores cores, so the engines' decode steps and the trainer's step run max(1, (k + 1) /
host_cores) times slower (k counted when the trainer step starts). 0, the default: every
instance and the trainer have devices of their own (a cluster).
Coefficients come from `dora.sim.presets` (the roofline derivation, with sources) or a YAML
cost file (`--cost`; calibration writes one).
"""

from __future__ import annotations

from dataclasses import dataclass

from dora.errors import InputError, too_small
from dora.sched.costs import DecodeCost, TrainCost


MAX_COEF = 1e9  # seconds (30 years): above it, simulated clocks lose their precision
MIN_CORES = 0.01  # a shared host's smallest share (below it every step stretches beyond any run)


@dataclass
class CostModel:
    """Cost coefficients (seconds). Defaults are `presets.derive('H800', 'qwen3-30b-a3b', 2)`
    rounded to 4 digits; `--hardware/--model` or `--cost FILE.yaml` replace them."""

    decode_base_s: float = 0.002459  # a: per decode step (non-expert weights + step overhead)
    decode_expert_s: float = 0.010818  # e: reading every routed expert once (MoE; 0 for dense)
    expert_touch: float = 0.0625  # r: FFN experts a token uses / routed experts
    decode_per_seq_s: float = 1.0252e-5  # b: per running sequence per step
    decode_per_ctx_token_s: float = 1.834e-8  # c: per context token per step (KV read or attention FLOPs)
    prefill_per_token_s: float = 5.592e-6  # per prompt (or re-prefilled) token
    kv_transfer_base_s: float = 0.005  # per migration with KV
    kv_transfer_per_token_s: float = 9.83e-7  # KV bytes per token / instance network bandwidth
    weight_load_s: float = 1.1106  # one instance pulls and loads a version
    colocated_reshard_s: float = 0.6527  # colocated: trainer -> rollout weight reshard on the same devices
    publish_s: float = 0.6527  # trainer-side: gather and publish a version
    train_base_s: float = 3.0  # per trainer step (optimizer, sync)
    train_device_s_per_token: float = 7.030e-5  # device-seconds per trained token (fwd+bwd+logprob)
    trainer_resize_s: float = 31.22  # the trainer's devices change: state resharded, data-parallel group re-formed
    request_latency_s: float = 0.0  # per request, outside engine steps: dispatch -> engine + result -> policy
    host_cores: float = 0.0  # engines and trainer share this many cores (0: own devices each)
    moe_imbalance_cv: float = -1.0  # per-instance slowdown CV; -1 = take it from the trace metadata
    source: str = "presets.derive(H800, qwen3-30b-a3b, devices_per_instance=2), rounded"

    def validate(self) -> None:
        """Coefficients in [0, MAX_COEF] (seconds, or cores for host_cores)."""
        for name in ("decode_base_s", "decode_expert_s", "decode_per_seq_s", "decode_per_ctx_token_s", "prefill_per_token_s",
                     "kv_transfer_base_s", "kv_transfer_per_token_s", "weight_load_s", "colocated_reshard_s",
                     "publish_s", "train_base_s", "train_device_s_per_token", "trainer_resize_s", "request_latency_s",
                     "host_cores"):
            v = getattr(self, name)
            if not 0 <= v <= MAX_COEF:
                raise InputError(f"{name}: must be in [0, {MAX_COEF:g}], got {v}")
        if 0 < self.host_cores < MIN_CORES:
            raise InputError(f"host_cores: must be 0 (devices of their own) or at least {MIN_CORES} cores, got "
                             f"{self.host_cores}; set it to 0 or to {MIN_CORES} or more")
        if not 0 <= self.expert_touch <= 1:
            raise InputError(f"expert_touch: must be in [0, 1] (top_k / experts), got {self.expert_touch}")
        if self.decode_base_s + self.decode_per_seq_s <= 0:
            raise InputError("decode_base_s + decode_per_seq_s: must be > 0 (a decode step takes time); set either "
                             "above 0")
        if self.moe_imbalance_cv < 0 and self.moe_imbalance_cv != -1.0:
            raise too_small("moe_imbalance_cv", self.moe_imbalance_cv, 0,
                            fix="set it to 0 or more, or -1 to take it from the trace")

    def weights_s(self, n: int) -> float:
        """Weight-read time of one forward pass over n sequences of one version."""
        if self.decode_expert_s == 0.0 or n == 0:
            return self.decode_base_s
        return self.decode_base_s + self.decode_expert_s * (1.0 - (1.0 - self.expert_touch) ** n)

    def step_s(self, per_version: list[int], ctx_sum: int, prefill_tokens: int = 0, f: float = 1.0) -> float:
        """One step with per_version[i] sequences of each version present (reference arithmetic)."""
        w = sum(self.weights_s(n) for n in per_version if n)
        return f * (w + self.decode_per_seq_s * sum(per_version) + self.decode_per_ctx_token_s * ctx_sum
                    + self.prefill_per_token_s * prefill_tokens)

    def train_s(self, tokens: int, devices: int) -> float:
        return self.train_base_s + self.train_device_s_per_token * tokens / devices

    def host_factor(self, busy: int) -> float:
        """Slowdown of `busy` processes sharing the host's cores (1 without a shared host)."""
        return max(1.0, busy / self.host_cores) if self.host_cores > 0 else 1.0

    def decode_cost(self) -> DecodeCost:
        """The coefficients a scheduler is given (not the instances' slowdowns: it learns those)."""
        return DecodeCost(self.decode_base_s, self.decode_expert_s, self.expert_touch, self.decode_per_seq_s,
                          self.decode_per_ctx_token_s, self.prefill_per_token_s, self.kv_transfer_base_s,
                          self.kv_transfer_per_token_s, self.weight_load_s)

    def train_cost(self) -> TrainCost:
        """The trainer's step model a scheduler is given."""
        return TrainCost(self.train_base_s, self.train_device_s_per_token, self.publish_s, self.trainer_resize_s)

    def kv_transfer_s(self, ctx_tokens: int) -> float:
        return self.kv_transfer_base_s + self.kv_transfer_per_token_s * ctx_tokens
