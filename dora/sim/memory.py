"""Decode slots and KV capacity from memory, the way vLLM sizes an engine.

Per device of an instance of k devices (the weights sharded k ways, tensor/expert parallel):

    usable      = gpu_memory_utilization × device memory                (vLLM default 0.9)
    weights     = W / k                                                  (bf16)
    activations = max_num_batched_tokens × A / k                          (the profile run's peak MLP
                  + max_num_seqs × vocab × 4 B / k                         activations, the fp32 logits
                  + cuda_graph_gb                                          of one step, CUDA graphs)
    KV / token  = KV bytes per token / min(k, KV heads)                  (GQA heads split over at
                                                                           most that many devices;
                                                                           MLA's latent: 1 head,
                                                                           every device holds it all)
    KV tokens   = (usable − weights − activations) / (KV / token)

with A = 2 bytes × the MLP's gate+up width a token goes through (dense: 2 × intermediate; MoE:
2 × expert intermediate × experts per token). max_num_seqs and max_num_batched_tokens are
vLLM's offline (LLM class) defaults for the device: 1024 and 16,384 on devices with >= 70 GB that
are not A100s, else 256 and 8,192.

Decode slots = min(max_num_seqs, KV tokens / the trace's mean context), the mean context being
mean prompt + mean response length: beyond that many sequences, the average one could not
finish without the engine preempting another (the simulator models preemption when contexts
outgrow the KV cache either way). `cluster.max_seqs = 0` and `cluster.kv_tokens = 0` ask for
these derived values (`--max-seqs auto`); the run's header line prints the derivation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dora.errors import InputError
from dora.sim.presets import Hardware, Model, lookup

if TYPE_CHECKING:
    from dora.sim.config import SimConfig
    from dora.trace import Trace

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization
CUDA_GRAPH_GB = 1.0  # per device: vLLM's captured CUDA graphs and the non-torch allocations (assumption)

# what the KV and activation terms need beyond the cost presets (the same config.json files)
# model -> (KV heads, vocabulary, gate+up width per token)
SHAPES: dict[str, tuple[int, int, int]] = {
    "qwen2.5-7b": (4, 152064, 2 * 18944),
    "qwen2.5-32b": (8, 152064, 2 * 27648),
    "qwen3-30b-a3b": (4, 151936, 2 * 768 * 8),
    "longcat-flash": (1, 131072, 2 * 2048 * 12),  # MLA: one latent per token, held whole by every device
}


def vllm_defaults(hw: Hardware) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens): vLLM's offline defaults for this device."""
    if hw.memory_gb >= 70 and hw.name != "A100":
        return 1024, 16384
    return 256, 8192


@dataclass(frozen=True)
class Sizing:
    kv_tokens: int
    max_seqs: int
    cap: int  # vLLM's max_num_seqs default
    mean_context: float
    per_device_gb: dict  # usable, weights, activations, kv

    def line(self, hw: str, model: str, k: int, given_slots: int = 0) -> str:
        """The derivation, one line; `given_slots`: the user's decode slots, shown beside the derived."""
        d = self.per_device_gb
        derived = (f"{self.max_seqs} = min(vLLM max_num_seqs {self.cap}, {self.kv_tokens:,} / "
                   f"{self.mean_context:,.0f} mean context tokens)")
        slots = f"{given_slots} as given (from memory: {derived})" if given_slots else derived
        return (f"memory ({hw} x {k}, {model}): per device {d['usable']:.1f} GB usable - {d['weights']:.1f} weights - "
                f"{d['activations']:.1f} activations = {d['kv']:.1f} GB of KV -> {self.kv_tokens:,} KV tokens per "
                f"instance; decode slots {slots}")


def kv_tokens(hw: Hardware, model: Model, k: int) -> tuple[int, dict]:
    """KV tokens per instance and the per-device budget in GB (usable, weights, activations, kv)."""
    if model.name not in SHAPES:
        raise InputError(f"model {model.name!r}: no memory shape for it; set cluster.max_seqs and cluster.kv_tokens")
    kv_heads, vocab, width = SHAPES[model.name]
    seqs, batched = vllm_defaults(hw)
    usable = GPU_MEMORY_UTILIZATION * hw.memory_gb
    weights = model.params_b * 2 / k
    acts = (batched * width * 2 + seqs * vocab * 4) / k / 1e9 + CUDA_GRAPH_GB
    kv_gb = usable - weights - acts
    if kv_gb <= 0:
        raise InputError(f"memory: {k} x {hw.name} leave no room for a KV cache of {model.name} ({usable:.1f} GB usable "
                         f"per device, {weights:.1f} weights, {acts:.1f} activations); raise devices_per_instance")
    per_token = model.kv_bytes_per_token / min(k, kv_heads)
    return int(kv_gb * 1e9 / per_token), {"usable": usable, "weights": weights, "activations": acts, "kv": kv_gb}


def size(hardware: str, model: str, k: int, mean_context: float, kv: int = 0) -> Sizing:
    """The sizing of an instance of k devices; `kv`: a KV capacity given instead of derived."""
    hw, m = lookup(hardware, model)
    tokens, budget = kv_tokens(hw, m, k)
    tokens = kv or tokens
    cap = vllm_defaults(hw)[0]
    slots = max(1, min(cap, int(tokens // max(mean_context, 1.0))))
    return Sizing(tokens, slots, cap, mean_context, budget)


def resolve(cfg: SimConfig, trace: Trace) -> tuple[SimConfig, str | None]:
    """`cfg` with cluster.max_seqs / cluster.kv_tokens of 0 replaced by the derived values, and the
    derivation's line (None when nothing was derived)."""
    from dataclasses import replace

    c = cfg.cluster
    if c.max_seqs and c.kv_tokens:
        return cfg, None
    ctx = float(trace.prompt_len.mean() + trace.response_len.mean())
    s = size(c.hardware, c.model, c.devices_per_instance, ctx, c.kv_tokens)
    cluster = replace(c, max_seqs=c.max_seqs or s.max_seqs, kv_tokens=s.kv_tokens)
    return replace(cfg, cluster=cluster), s.line(c.hardware, c.model, c.devices_per_instance, c.max_seqs)
