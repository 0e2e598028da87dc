"""Hardware and model presets, and the roofline derivation of cost coefficients from them.

Derivation for an instance of k devices serving a model in bf16 (tensor/expert parallel over
the k devices, each reading 1/k of the bytes at an achieved fraction of peak bandwidth):

    decode_base_s          = non-expert weight bytes / (k·BW·η_bw) + step overhead
    decode_expert_s        = expert weight bytes / (k·BW·η_bw); multiplied per step by the
                             share of experts a batch of n tokens touches, 1 - (1 - top_k/E)^n
    decode_per_seq_s       = 2·active params FLOPs / (k·peak·η_decode)
    decode_per_ctx_token_s = KV bytes per token / (k·BW·η_bw)       (attention reads the KV)
    prefill_per_token_s    = 2·active params / (k·peak·η_prefill)
    kv_transfer_per_token_s = KV bytes per token / (k·NIC bandwidth)
    weight_load_s          = weight bytes / (k·NIC bandwidth) + 0.5 s (load into the engine)
    publish_s              = weight bytes / (trainer NIC bandwidth·8 devices) + 0.5 s
    train_device_s_per_token = 8·active params / (peak·η_train)     (6N fwd+bwd, 2N logprob)

The η factors are assumptions, stated in ASSUMPTIONS with where they come from; a
calibration run (`python -m dora.sim calibrate`) replaces them with fitted values.
"""

from __future__ import annotations

from dataclasses import dataclass

from dora.errors import InputError
from dora.sim.cost import CostModel


@dataclass(frozen=True)
class Hardware:
    name: str
    memory_gb: float
    hbm_tb_s: float  # HBM bandwidth, TB/s
    bf16_tflops: float  # dense bf16 tensor-core peak, TFLOP/s
    nvlink_gb_s: float  # per-GPU NVLink bandwidth (bidirectional), GB/s
    nic_gb_s: float  # per-GPU scale-out network, GB/s
    source: str


HARDWARE = {
    "H100": Hardware("H100", 80, 3.35, 989.0, 900, 50,
                     "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 80 GB HBM3, 3.35 TB/s, 989 TF bf16 dense, "
                     "NVLink 900 GB/s); 400 Gb/s ConnectX-7 per GPU in DGX H100"),
    "H800": Hardware("H800", 80, 3.35, 989.0, 400, 50,
                     "NVIDIA H800 SXM5 (export variant of H100: same HBM3 3.35 TB/s and 989 TF bf16, NVLink cut to "
                     "400 GB/s); 400 Gb/s IB per GPU as in DeepSeek-V3 report (arXiv 2412.19437, Sec. 3.1)"),
    "H20": Hardware("H20", 96, 4.0, 148.0, 900, 50,
                    "NVIDIA HGX H20 spec sheet: 96 GB HBM3, 4.0 TB/s, 148 TF bf16 dense, NVLink 900 GB/s"),
    "A100": Hardware("A100", 80, 2.039, 312.0, 600, 25,
                     "NVIDIA A100 datasheet (SXM4 80GB: 2,039 GB/s HBM2e, 312 TF bf16 dense, NVLink 600 GB/s); "
                     "200 Gb/s HDR IB per GPU in DGX A100"),
    "H200": Hardware("H200", 141, 4.8, 989.0, 900, 50,
                     "NVIDIA H200 datasheet (SXM: 141 GB HBM3e, 4.8 TB/s, 989 TF bf16 dense, NVLink 900 GB/s)"),
}


@dataclass(frozen=True)
class Model:
    name: str
    params_b: float  # total parameters, billions
    active_b: float  # parameters used per token, billions
    expert_b: float  # parameters in routed experts, billions (0 for dense)
    layers: int
    kv_bytes_per_token: int  # bf16 KV cache bytes per token, all layers
    experts: int  # routed experts per layer (0 dense)
    top_k: int
    source: str


def _gqa_kv(layers: int, kv_heads: int, head_dim: int) -> int:
    return 2 * layers * kv_heads * head_dim * 2  # K and V, bf16


MODELS = {
    "qwen2.5-7b": Model("qwen2.5-7b", 7.62, 7.62, 0.0, 28, _gqa_kv(28, 4, 128), 0, 0,
                        "Qwen2.5-7B config.json: 28 layers, 4 KV heads x 128; 7.61B params (Qwen2.5 report)"),
    "qwen2.5-32b": Model("qwen2.5-32b", 32.76, 32.76, 0.0, 64, _gqa_kv(64, 8, 128), 0, 0,
                         "Qwen2.5-32B config.json: 64 layers, 8 KV heads x 128; 32.5B params (Qwen2.5 report)"),
    "qwen3-30b-a3b": Model("qwen3-30b-a3b", 30.5, 3.3, 29.0, 48, _gqa_kv(48, 4, 128), 128, 8,
                           "Qwen3-30B-A3B config.json: 48 layers, 4 KV heads x 128, 128 experts top-8, expert "
                           "FFN 768 x hidden 2048 -> 29.0B in experts; 30.5B total / 3.3B active (Qwen3 report)"),
    "longcat-flash": Model("longcat-flash", 560.0, 27.0, 541.0, 28, 56 * (512 + 64) * 2, 512, 12,
                           "LongCat-Flash (arXiv 2509.01322; HF LongcatFlashConfig): 28 layers with 2 MLA blocks "
                           "each (kv_lora_rank 512 + rope 64, bf16), 512 experts x FFN 2048 x hidden 6144, top-12 "
                           "with 256 zero experts; 560B total, 18.6-31.3B (avg ~27B) active"),
}

ASSUMPTIONS = {
    "eta_bw": (0.80, "achieved share of HBM bandwidth in decode kernels (vLLM/FlashInfer measurements on H100 reach "
                     "75-90%)"),
    "eta_decode": (0.30, "MFU of the per-token matmuls at decode batch sizes (memory-bound regime)"),
    "eta_prefill": (0.55, "prefill MFU (compute-bound; Sarathi-Serve/vLLM report 50-60%)"),
    "eta_train": (0.35, "training MFU (Megatron dense ~40-50%; MoE and RL micro-batching lower)"),
    "step_overhead_s": (0.002, "per-step scheduler + launch overhead of vLLM with CUDA graphs"),
}


def instance_devices(hw: Hardware, model: Model) -> int:
    """Smallest power of two whose memory holds the bf16 weights in <= 60% (rest is KV)."""
    k = 1
    while model.params_b * 2 > 0.6 * hw.memory_gb * k:
        k *= 2
    return k


def kv_capacity_tokens(hw: Hardware, model: Model, k: int) -> int:
    """KV tokens that fit in 90% of memory (vLLM gpu_memory_utilization) minus the weights."""
    free = 0.9 * hw.memory_gb * k - model.params_b * 2
    return max(int(free * 1e9 / model.kv_bytes_per_token), 0)


def derive(hardware: str, model: str, devices_per_instance: int = 0) -> tuple[CostModel, dict]:
    """Cost coefficients for `model` on `hardware`; returns (CostModel, cluster hints)."""
    if hardware not in HARDWARE:
        raise InputError(f"--hardware {hardware!r}: unknown; choose from {', '.join(HARDWARE)}")
    if model not in MODELS:
        raise InputError(f"--model {model!r}: unknown; choose from {', '.join(MODELS)}")
    hw, m = HARDWARE[hardware], MODELS[model]
    k = devices_per_instance or instance_devices(hw, m)
    if m.params_b * 2 > 0.9 * hw.memory_gb * k:
        raise InputError(f"devices_per_instance: {k} x {hw.name} ({hw.memory_gb:g} GB) cannot hold {m.name} "
                         f"({m.params_b * 2:.0f} GB of bf16 weights); use at least {instance_devices(hw, m)}")
    bw = hw.hbm_tb_s * 1e12 * ASSUMPTIONS["eta_bw"][0] * k
    flops = hw.bf16_tflops * 1e12 * k
    nic = hw.nic_gb_s * 1e9 * k
    w_bytes = m.params_b * 1e9 * 2
    dense_bytes = (m.params_b - m.expert_b) * 1e9 * 2
    cost = CostModel(
        decode_base_s=dense_bytes / bw + ASSUMPTIONS["step_overhead_s"][0],
        decode_expert_s=m.expert_b * 1e9 * 2 / bw,
        expert_touch=(m.top_k / m.experts) if m.experts else 0.0,
        decode_per_seq_s=2 * m.active_b * 1e9 / (flops * ASSUMPTIONS["eta_decode"][0]),
        decode_per_ctx_token_s=m.kv_bytes_per_token / bw,
        prefill_per_token_s=2 * m.active_b * 1e9 / (flops * ASSUMPTIONS["eta_prefill"][0]),
        kv_transfer_base_s=0.005,
        kv_transfer_per_token_s=m.kv_bytes_per_token / nic,
        weight_load_s=w_bytes / nic + 0.5,
        colocated_reshard_s=w_bytes / (hw.nvlink_gb_s * 1e9 * k) + 0.5,
        publish_s=w_bytes / (hw.nic_gb_s * 1e9 * 8) + 0.5,
        train_base_s=3.0,
        train_device_s_per_token=8 * m.active_b * 1e9 / (hw.bf16_tflops * 1e12 * ASSUMPTIONS["eta_train"][0]),
        source=f"presets.derive({hw.name}, {m.name}, devices_per_instance={k})",
    )
    hints = {"devices_per_instance": k, "kv_tokens": kv_capacity_tokens(hw, m, k)}
    return cost, hints
