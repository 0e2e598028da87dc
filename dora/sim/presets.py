"""Hardware and model presets, and the roofline derivation of cost coefficients from them.

An instance is k devices serving the model in bf16 (tensor/expert parallel over the k
devices); each device reads 1/k of the bytes and does 1/k of the FLOPs. With
BW = k·HBM bandwidth·η_bw, F = k·bf16 peak, NIC = per-device scale-out bandwidth,
W = all weight bytes (2·params), D = bytes of the non-expert weights read every step
(2·(params − expert params − input embedding)), X = 2·expert params and
N = active params − input embedding (the matmul parameters a token goes through):

    decode_base_s            = D / BW + step_overhead_s
    decode_expert_s          = X / BW; the cost model multiplies it per step by the share of
                               experts a batch of n tokens touches, 1 - (1 - expert_touch)^n
    expert_touch             = FFN experts per token / routed experts
    decode_per_seq_s         = 2·N / (F·η_decode)
    decode_per_ctx_token_s   = max(KV bytes per token / BW,
                                   attention FLOPs per context token / (F·η_decode))
    prefill_per_token_s      = 2·N / (F·η_prefill)
    kv_transfer_base_s       = kv_transfer_base_s (assumption)
    kv_transfer_per_token_s  = KV bytes per token / (k·NIC)
    weight_load_s            = W / (k·NIC) + handover_s
    colocated_reshard_s      = W / (k·NVLink/2) + handover_s   (NVLink figures are bidirectional)
    publish_s                = W / (publish_devices·NIC) + handover_s
    train_base_s             = train_base_s (assumption)
    trainer_resize_s         = 16·P / (publish_devices·NIC) + regroup_s   (the training state,
                               16 bytes a parameter, moved once; regroup_s an assumption)
    train_device_s_per_token = 8·N / (bf16 peak·η_train)   (6N forward+backward, 2N old-policy logprob)

Not modelled: attention FLOPs in prefill and training (they grow with context; for long
reasoning traces they add to the 8·N per trained token), communication inside an instance.
The η factors and fixed costs are assumptions, stated in ASSUMPTIONS with where they come
from; a cost YAML (`python -m dora.sim.presets ... --yaml FILE`, later overwritten by
calibration) replaces any coefficient via `python -m dora.sim --cost FILE`.

CLI: python -m dora.sim.presets --hardware H800 --model longcat-flash [--devices-per-instance K] [--yaml OUT]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from dora.errors import ArgumentParser, InputError, cli_errors, too_small
from dora.io import check_output, write_text
from dora.sim.cost import CostModel


@dataclass(frozen=True)
class Hardware:
    name: str
    memory_gb: float
    hbm_tb_s: float  # HBM bandwidth, TB/s
    bf16_tflops: float  # dense (no sparsity) bf16 tensor-core peak, TFLOP/s
    nvlink_gb_s: float  # per-GPU NVLink bandwidth, both directions together, GB/s
    nic_gb_s: float  # per-GPU scale-out network (one direction), GB/s
    source: str


HARDWARE = {
    "H100": Hardware("H100", 80, 3.35, 989.0, 900, 50,
                     "NVIDIA H100 Tensor Core GPU datasheet, SXM5: 80 GB HBM3, 3.35 TB/s, bf16 989 TFLOPS dense "
                     "(1,979 with sparsity), NVLink 900 GB/s; DGX H100: one 400 Gb/s ConnectX-7 per GPU"),
    "H800": Hardware("H800", 80, 3.35, 989.0, 400, 50,
                     "NVIDIA H800 SXM5 (export variant of the H100: same die, HBM3 80 GB 3.35 TB/s, bf16 989 TFLOPS "
                     "dense; NVLink cut to 400 GB/s); 400 Gb/s InfiniBand per GPU as in DeepSeek-V3 technical "
                     "report (arXiv 2412.19437, Sec. 3.1)"),
    "H20": Hardware("H20", 96, 4.0, 148.0, 900, 50,
                    "NVIDIA HGX H20 product brief: 96 GB HBM3, 4.0 TB/s, bf16 148 TFLOPS dense, NVLink 900 GB/s; "
                    "400 Gb/s NIC per GPU assumed as for HGX H100"),
    "A100": Hardware("A100", 80, 2.039, 312.0, 600, 25,
                     "NVIDIA A100 datasheet, SXM4 80GB: HBM2e 2,039 GB/s, bf16 312 TFLOPS dense, NVLink 600 GB/s; "
                     "DGX A100: one 200 Gb/s HDR InfiniBand per GPU"),
    "H200": Hardware("H200", 141, 4.8, 989.0, 900, 50,
                     "NVIDIA H200 datasheet, SXM: 141 GB HBM3e, 4.8 TB/s, bf16 989 TFLOPS dense (1,979 with "
                     "sparsity), NVLink 900 GB/s; 400 Gb/s NIC per GPU as in HGX H100"),
}


@dataclass(frozen=True)
class Model:
    name: str
    params_b: float  # total parameters, billions
    active_b: float  # parameters used per token (average), billions
    expert_b: float  # parameters in routed experts, billions (0 for dense)
    embed_b: float  # input embedding table, billions (a row lookup: neither read whole nor multiplied)
    kv_bytes_per_token: int  # bf16 KV cache bytes per token, all layers
    attn_flops_per_ctx_token: int  # decode attention FLOPs per cached token per generated token, all layers
    experts: int  # routed FFN experts per layer (0 dense)
    ffn_experts_per_token: float  # FFN experts a token uses on average (top_k; fewer with zero experts)
    source: str


def _gqa_kv_bytes(layers: int, kv_heads: int, head_dim: int) -> int:
    """K and V, bf16, every layer."""
    return 2 * layers * kv_heads * head_dim * 2


def _gqa_attn_flops(layers: int, heads: int, head_dim: int) -> int:
    """q·K and p·V for each query head: 2 multiply-adds of head_dim per cached token."""
    return 4 * layers * heads * head_dim


def _dense_params(vocab: int, hidden: int, inter: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                  qkv_bias: bool) -> int:
    """Decoder-only transformer with GQA attention, SwiGLU MLP, RMSNorms, untied LM head."""
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    bias = (heads + 2 * kv_heads) * head_dim if qkv_bias else 0
    return layers * (attn + bias + 3 * hidden * inter + 2 * hidden) + 2 * vocab * hidden + hidden


def _qwen3_moe_params(vocab: int, hidden: int, moe_inter: int, layers: int, heads: int, kv_heads: int,
                      head_dim: int, experts: int, top_k: int) -> tuple[int, int, int]:
    """(total, active, routed-expert) parameters of a Qwen3-MoE config (q/k norms, router, no shared expert)."""
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + 2 * head_dim
    expert = 3 * hidden * moe_inter
    base = layers * (attn + hidden * experts + 2 * hidden) + 2 * vocab * hidden + hidden
    return base + layers * experts * expert, base + layers * top_k * expert, layers * experts * expert


_Q7 = _dense_params(152064, 3584, 18944, 28, 28, 4, 128, qkv_bias=True)
_Q32 = _dense_params(152064, 5120, 27648, 64, 40, 8, 128, qkv_bias=True)
_Q3MOE = _qwen3_moe_params(151936, 2048, 768, 48, 32, 4, 128, 128, 8)
# LongCat-Flash: 28 layers, each with 2 MLA blocks and one MoE block of 512 FFN experts
# (expert FFN 2048, hidden 6144, SwiGLU) + 256 zero-computation (identity) experts, top-12.
_LC_EXPERT = 28 * 512 * 3 * 6144 * 2048
_LC_BLOCKS = 28 * 2
# The paper's active range: 18.6B with no FFN expert chosen, 31.3B with all 12, 27B average,
# so a token uses 12·(27 − 18.6)/(31.3 − 18.6) ≈ 7.94 FFN experts on average.
_LC_FFN_PER_TOKEN = 12 * (27.0 - 18.6) / (31.3 - 18.6)

MODELS = {
    "qwen2.5-7b": Model(
        "qwen2.5-7b", _Q7 / 1e9, _Q7 / 1e9, 0.0, 152064 * 3584 / 1e9, _gqa_kv_bytes(28, 4, 128),
        _gqa_attn_flops(28, 28, 128), 0, 0.0,
        "Qwen/Qwen2.5-7B config.json: vocab 152064, hidden 3584, intermediate 18944, 28 layers, 28 query / 4 KV "
        "heads x 128, qkv bias, untied LM head -> 7.62B parameters (model card: 7.61B)"),
    "qwen2.5-32b": Model(
        "qwen2.5-32b", _Q32 / 1e9, _Q32 / 1e9, 0.0, 152064 * 5120 / 1e9, _gqa_kv_bytes(64, 8, 128),
        _gqa_attn_flops(64, 40, 128), 0, 0.0,
        "Qwen/Qwen2.5-32B config.json: vocab 152064, hidden 5120, intermediate 27648, 64 layers, 40 query / 8 KV "
        "heads x 128, qkv bias, untied LM head -> 32.76B parameters counted from the config (model card rounds "
        "to 32.5B)"),
    "qwen3-30b-a3b": Model(
        "qwen3-30b-a3b", _Q3MOE[0] / 1e9, _Q3MOE[1] / 1e9, _Q3MOE[2] / 1e9, 151936 * 2048 / 1e9,
        _gqa_kv_bytes(48, 4, 128), _gqa_attn_flops(48, 32, 128), 128, 8.0,
        "Qwen/Qwen3-30B-A3B config.json: vocab 151936, hidden 2048, 48 layers, 32 query / 4 KV heads x 128, "
        "128 experts (moe_intermediate_size 768) top-8, untied LM head -> 30.53B total, 3.35B active, 28.99B "
        "in experts (Qwen3 technical report, arXiv 2505.09388: 30.5B / 3.3B)"),
    "longcat-flash": Model(
        "longcat-flash", 560.0, 27.0, _LC_EXPERT / 1e9, 131072 * 6144 / 1e9, _LC_BLOCKS * (512 + 64) * 2,
        _LC_BLOCKS * 64 * 2 * ((512 + 64) + 512), 512, _LC_FFN_PER_TOKEN,
        "LongCat-Flash technical report (arXiv 2509.01322): 560B total, 18.6-31.3B active (average ~27B); "
        "meituan-longcat/LongCat-Flash-Chat config.json: 28 layers x 2 MLA blocks (kv_lora_rank 512 + "
        "qk_rope_head_dim 64 cached per token, 64 heads; absorbed-MLA decode attends over 576 dims and "
        "outputs 512 per head), 512 FFN experts (expert_ffn_hidden_size 2048, hidden 6144) + 256 zero "
        "experts, moe_topk 12, vocab 131072 -> 541.2B in experts"),
}

ASSUMPTIONS = {
    "eta_bw": (0.80, "achieved share of HBM bandwidth in decode kernels (vLLM/FlashInfer measurements on H100 reach "
                     "75-90%)"),
    "eta_decode": (0.30, "MFU of the per-token matmuls and attention at decode batch sizes (memory-bound regime)"),
    "eta_prefill": (0.55, "prefill MFU (compute-bound; Sarathi-Serve/vLLM report 50-60%)"),
    "eta_train": (0.35, "training MFU (Megatron dense ~40-50%; MoE and RL micro-batching lower)"),
    "step_overhead_s": (0.002, "per decode step scheduler + launch overhead of vLLM with CUDA graphs"),
    "handover_s": (0.5, "fixed cost of one weight hand-over (engine reload, buffer setup); not derived: calibrate"),
    "publish_devices": (8, "the trainer publishes from one 8-GPU node's NICs"),
    "kv_transfer_base_s": (0.005, "per-migration setup of a KV transfer (connection, block table); calibrate"),
    "train_base_s": (3.0, "per trainer step fixed cost (optimizer step, gradient sync, launch); not derived: "
                          "calibrate"),
    "regroup_s": (30.0, "re-forming the trainer's data-parallel group when rollout devices join or leave it "
                        "(communicators, process groups); not derived, conservative: calibrate"),
}


def _a(key: str) -> float:
    return ASSUMPTIONS[key][0]


def instance_devices(hw: Hardware, model: Model) -> int:
    """Smallest power of two whose memory holds the bf16 weights in <= 60% (rest is KV)."""
    k = 1
    while model.params_b * 2 > 0.6 * hw.memory_gb * k:
        k *= 2
    return k


def lookup(hardware: str, model: str) -> tuple[Hardware, Model]:
    if hardware not in HARDWARE:
        raise InputError(f"--hardware {hardware!r}: unknown; choose from {', '.join(HARDWARE)}")
    if model not in MODELS:
        raise InputError(f"--model {model!r}: unknown; choose from {', '.join(MODELS)}")
    return HARDWARE[hardware], MODELS[model]


def derivation(hardware: str, model: str, devices_per_instance: int = 0) -> tuple[list[tuple[str, float, str]], dict]:
    """[(coefficient, value, formula with its inputs)] in CostModel order, and the cluster hints."""
    hw, m = lookup(hardware, model)
    if devices_per_instance < 0:
        raise too_small("devices_per_instance", devices_per_instance, 1,
                        fix="pass --devices-per-instance 1 or more, or 0 for the smallest that fits")
    k = devices_per_instance or instance_devices(hw, m)
    if m.params_b * 2 > 0.9 * hw.memory_gb * k:
        raise InputError(f"devices_per_instance: {k} x {hw.name} ({hw.memory_gb:g} GB) cannot hold {m.name} "
                         f"({m.params_b * 2:.0f} GB of bf16 weights); use at least {instance_devices(hw, m)}")
    eta_bw, eta_dec, eta_pre, eta_tr = _a("eta_bw"), _a("eta_decode"), _a("eta_prefill"), _a("eta_train")
    bw = k * hw.hbm_tb_s * 1e12 * eta_bw
    flops = k * hw.bf16_tflops * 1e12
    nic = hw.nic_gb_s * 1e9
    w = m.params_b * 1e9 * 2
    d = (m.params_b - m.expert_b - m.embed_b) * 1e9 * 2
    x = m.expert_b * 1e9 * 2
    n = (m.active_b - m.embed_b) * 1e9
    kv = m.kv_bytes_per_token
    af = m.attn_flops_per_ctx_token
    bw_s = f"BW = {k} x {hw.hbm_tb_s:g} TB/s x {eta_bw:g}"
    fl_s = f"F = {k} x {hw.bf16_tflops:g} TFLOP/s"
    ho = _a("handover_s")
    pd = int(_a("publish_devices"))
    ctx_mem, ctx_fl = kv / bw, af / (flops * eta_dec)
    terms = [
        ("decode_base_s", d / bw + _a("step_overhead_s"),
         f"D / BW + overhead = {d / 1e9:.2f} GB / ({bw_s}) + {_a('step_overhead_s'):g} s"),
        ("decode_expert_s", x / bw, f"X / BW = {x / 1e9:.1f} GB / ({bw_s})"),
        ("expert_touch", m.ffn_experts_per_token / m.experts if m.experts else 0.0,
         f"FFN experts per token / experts = {m.ffn_experts_per_token:.3g} / {m.experts}"),
        ("decode_per_seq_s", 2 * n / (flops * eta_dec),
         f"2N / (F x eta_decode) = 2 x {n / 1e9:.2f}e9 / ({fl_s} x {eta_dec:g})"),
        ("decode_per_ctx_token_s", max(ctx_mem, ctx_fl),
         f"max(KV / BW, attn FLOPs / (F x eta_decode)) = max({kv:,} B / ({bw_s}), {af:,} / ({fl_s} x {eta_dec:g}))"
         f" = max({ctx_mem:.4g}, {ctx_fl:.4g}): {'memory' if ctx_mem >= ctx_fl else 'compute'}-bound"),
        ("prefill_per_token_s", 2 * n / (flops * eta_pre),
         f"2N / (F x eta_prefill) = 2 x {n / 1e9:.2f}e9 / ({fl_s} x {eta_pre:g})"),
        ("kv_transfer_base_s", _a("kv_transfer_base_s"), "assumption kv_transfer_base_s"),
        ("kv_transfer_per_token_s", kv / (k * nic), f"KV / (k x NIC) = {kv:,} B / ({k} x {hw.nic_gb_s:g} GB/s)"),
        ("weight_load_s", w / (k * nic) + ho,
         f"W / (k x NIC) + handover = {w / 1e9:.1f} GB / ({k} x {hw.nic_gb_s:g} GB/s) + {ho:g} s"),
        ("colocated_reshard_s", w / (k * hw.nvlink_gb_s * 1e9 / 2) + ho,
         f"W / (k x NVLink/2) + handover = {w / 1e9:.1f} GB / ({k} x {hw.nvlink_gb_s:g}/2 GB/s) + {ho:g} s"),
        ("publish_s", w / (pd * nic) + ho,
         f"W / (publish_devices x NIC) + handover = {w / 1e9:.1f} GB / ({pd} x {hw.nic_gb_s:g} GB/s) + {ho:g} s"),
        ("train_base_s", _a("train_base_s"), "assumption train_base_s"),
        ("trainer_resize_s", 16 * m.params_b * 1e9 / (pd * nic) + _a("regroup_s"),
         f"16P / (publish_devices x NIC) + regroup = {16 * m.params_b:.0f} GB / ({pd} x {hw.nic_gb_s:g} GB/s) + "
         f"{_a('regroup_s'):g} s"),
        ("train_device_s_per_token", 8 * n / (hw.bf16_tflops * 1e12 * eta_tr),
         f"8N / (peak x eta_train) = 8 x {n / 1e9:.2f}e9 / ({hw.bf16_tflops:g} TFLOP/s x {eta_tr:g})"),
    ]
    hints = {"devices_per_instance": k}  # decode slots and KV capacity: per run, dora.sim.memory
    return terms, hints


def derive(hardware: str, model: str, devices_per_instance: int = 0) -> tuple[CostModel, dict]:
    """Cost coefficients for `model` on `hardware`; returns (CostModel, cluster hints)."""
    terms, hints = derivation(hardware, model, devices_per_instance)
    cost = CostModel(**{name: value for name, value, _ in terms},
                     source=f"presets.derive({hardware}, {model}, devices_per_instance={hints['devices_per_instance']})")
    cost.validate()
    return cost, hints


def cost_yaml(cost: CostModel, hints: dict, hw: Hardware, m: Model) -> str:
    """A cost file for `python -m dora.sim --cost`: every CostModel field; cluster hints as comments."""
    import yaml

    from dora.config import to_dict

    head = (f"# {cost.source}\n# hardware: {hw.source}\n# model: {m.source}\n"
            f"# cluster hints (not cost keys; pass as flags): --devices-per-instance {hints['devices_per_instance']}"
            f" (decode slots and KV capacity: derived per run from memory, dora.sim.memory)\n")
    return head + yaml.safe_dump(to_dict(cost), sort_keys=False)


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m dora.sim.presets",
                                 description="Print the roofline cost coefficients of a hardware x model preset.")
    ap.add_argument("--hardware", required=True, help=f"one of {', '.join(HARDWARE)}")
    ap.add_argument("--model", required=True, help=f"one of {', '.join(MODELS)}")
    ap.add_argument("--devices-per-instance", type=int, default=0,
                    help="devices per rollout instance (default: smallest power of two that fits)")
    ap.add_argument("--yaml", metavar="OUT.yaml", help="write a cost file that `python -m dora.sim --cost` reads")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("dora.sim.presets"):
        if args.yaml:
            check_output(args.yaml, ("yaml", "yml"), "--yaml", "cost.yaml")
        terms, hints = derivation(args.hardware, args.model, args.devices_per_instance)
        cost, _ = derive(args.hardware, args.model, args.devices_per_instance)
        hw, m = lookup(args.hardware, args.model)
        print(f"{hw.name} x {m.name}: instance = {hints['devices_per_instance']} devices "
              f"(decode slots and KV capacity: derived per run from memory, docs/planning.md)")
        print(f"  hardware: {hw.source}\n  model: {m.source}")
        print(f"  W = {m.params_b * 2:.1f} GB bf16 weights, N = {m.active_b - m.embed_b:.2f}B matmul params per token")
        for key, (v, why) in ASSUMPTIONS.items():
            print(f"  assumption {key} = {v:g}: {why}")
        w = max(len(t[0]) for t in terms)
        for name, value, formula in terms:
            print(f"{name.ljust(w)}  {value:<12.6g}  {formula}")
        if args.yaml:
            print(f"wrote {write_text(args.yaml, cost_yaml(cost, hints, hw, m))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
