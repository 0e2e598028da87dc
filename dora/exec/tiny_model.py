"""Build a tiny local Qwen2-architecture checkpoint (no download): random init, a small
byte-level BPE tokenizer (dora.exec.tokenizer), optional short supervised warm-start on the
synthetic counting task.

  python -m dora.exec.tiny_model --out /tmp/tiny [--warm-start-steps 400 --threads 1 --eval-prompts 64]

With --warm-start-steps, half of the supervised answers count in the wrong direction by default
(--warm-start-reverse-frac 0.5), so RL has a choice to learn (benchmarks/exec_speedup.py builds it so).

The directory loads with transformers' AutoModelForCausalLM/AutoTokenizer and with vllm.LLM.
vLLM's CPU attention needs head_dim = hidden_size / heads in {32, 64, 80, ...}, hence the
defaults (64 / 2 = 32). --eval-prompts N then samples 4 answers per prompt for N count-task
prompts (transformers generate, temperature 1) and prints the reward before any RL.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from dora.errors import InputError, cli_errors, too_small
from dora.exec.tokenizer import BOS, EOS, PAD, build_tokenizer, vocab_and_merges

VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def tiny_config(*, hidden_size: int = 64, layers: int = 2, heads: int = 2, kv_heads: int = 1,
                intermediate_size: int = 128, max_position: int = 4096, dtype: str = "float32"):
    """A transformers Qwen2Config for the tiny vocabulary."""
    from transformers import Qwen2Config

    if hidden_size % heads:
        raise InputError(f"tiny model: hidden_size {hidden_size} is not divisible by heads {heads}; choose a "
                         "multiple of heads")
    if heads % kv_heads:
        raise InputError(f"tiny model: heads {heads} is not divisible by kv_heads {kv_heads}; choose a divisor of "
                         "heads")
    head_dim = hidden_size // heads
    if head_dim not in VLLM_CPU_HEAD_SIZES:
        raise InputError(f"tiny model: head_dim = hidden_size/heads = {head_dim} is not supported by vLLM's "
                         f"CPU attention; choose hidden_size/heads in {VLLM_CPU_HEAD_SIZES}")
    if dtype not in ("float32", "bfloat16"):
        raise InputError(f"tiny model: dtype {dtype!r} is not one of 'float32', 'bfloat16'")
    return Qwen2Config(
        vocab_size=len(vocab_and_merges()[0]), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_position, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, use_sliding_window=False,
        torch_dtype=dtype, dtype=dtype)


def build_tiny_model(out_dir: str | Path, *, hidden_size: int = 64, layers: int = 2, heads: int = 2,
                     kv_heads: int = 1, intermediate_size: int = 128, max_position: int = 4096,
                     seed: int = 0, warm_start_steps: int = 0, dtype: str = "float32",
                     progress: bool = False, warm_start_reverse_frac: float = 0.0) -> Path:
    """Write a tiny HF checkpoint (safetensors + config + tokenizer) to out_dir; return its path.

    Deterministic for a seed. With warm_start_steps > 0, first trains that many supervised steps
    on the synthetic counting task (dora.exec.warm_start.sft_warm_start), so RL starts from a model
    that sometimes answers right; with warm_start_reverse_frac > 0 that fraction of the supervised
    answers count in the other direction (see sft_warm_start).
    """
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    if warm_start_steps < 0:
        raise too_small("tiny model: warm_start_steps", warm_start_steps, 0)
    if not 0.0 <= warm_start_reverse_frac < 1.0:
        raise InputError(f"tiny model: warm-start reverse fraction must be in [0, 1), got {warm_start_reverse_frac}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"tiny model: --out {out} exists and is not a directory; pass a directory path")
    config = tiny_config(hidden_size=hidden_size, layers=layers, heads=heads, kv_heads=kv_heads,
                         intermediate_size=intermediate_size, max_position=max_position, dtype=dtype)
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD,
                                               do_sample=True, temperature=1.0)
    info: dict = {"seed": seed, "warm_start_steps": warm_start_steps}
    if warm_start_steps and warm_start_reverse_frac:
        info["warm_start_reverse_frac"] = warm_start_reverse_frac
    if warm_start_steps:
        from dora.exec.warm_start import sft_warm_start

        t0 = time.perf_counter()
        losses = sft_warm_start(model, steps=warm_start_steps, seed=seed, progress=progress,
                                reverse_frac=warm_start_reverse_frac)
        info.update(warm_start_s=round(time.perf_counter() - t0, 2), warm_start_loss_first=losses[0],
                    warm_start_final_loss=losses[-1])
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    (out / "dora_tiny_model.json").write_text(json.dumps(info, indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dora.exec.tiny_model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--hidden-size", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--intermediate-size", type=int, default=128)
    ap.add_argument("--max-position", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--warm-start-steps", type=int, default=0,
                    help="supervised steps on the synthetic counting task before saving (default 0)")
    ap.add_argument("--warm-start-reverse-frac", type=float, default=0.5,
                    help="fraction of the supervised answers that count in the other direction (default 0.5: the "
                    "model picks the prompt's direction about half the time, which RL then learns; 0: plain SFT)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch CPU threads (default: torch's choice; 1 is faster on a busy 2-core machine)")
    ap.add_argument("--eval-prompts", type=int, default=0,
                    help="after building, sample 4 answers for each of N count prompts and print the reward")
    args = ap.parse_args(argv)
    if args.eval_prompts < 0:
        ap.error(f"--eval-prompts {args.eval_prompts}: must be >= 0; pass 0 or more")
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    with cli_errors("python -m dora.exec.tiny_model"):
        t0 = time.perf_counter()
        out = build_tiny_model(args.out, hidden_size=args.hidden_size, layers=args.layers, heads=args.heads,
                               kv_heads=args.kv_heads, intermediate_size=args.intermediate_size,
                               max_position=args.max_position, seed=args.seed, dtype=args.dtype,
                               warm_start_steps=args.warm_start_steps, progress=True,
                               warm_start_reverse_frac=args.warm_start_reverse_frac)
        print(f"tiny model written to {out} in {time.perf_counter() - t0:.1f} s")
        if args.eval_prompts:
            print(json.dumps(evaluate_count_task(out, args.eval_prompts)))
    return 0


def evaluate_count_task(model_dir: str | Path, prompts: int, *, group_size: int = 4, seed: int = 0,
                        max_new_tokens: int = 512) -> dict:
    """Reward of the checkpoint on `prompts` count-task prompts (seed `seed`, the default RL stream),
    sampling group_size answers each at temperature 1, plus the task's answer-length percentiles."""
    import numpy as np
    from transformers import AutoTokenizer

    from dora.exec.logprobs import load_model
    from dora.exec.rewards import count_reward
    from dora.exec.tasks import count_task, length_stats, tokenize_prompts
    from dora.exec.hf_rollout import hf_rollout

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = load_model(model_dir)
    ex = count_task(prompts, seed=seed)
    t0 = time.perf_counter()
    res = hf_rollout(model, tok, tokenize_prompts(tok, ex), [e.prompt_id for e in ex], group_size=group_size,
                     max_new_tokens=max_new_tokens, seed=seed)
    rewards = np.array([count_reward(text, ex[t.group_id].answer) for t, text in res])
    lens = np.array([len(t.response_ids) for t, _ in res])
    task = length_stats(tok, count_task(4000, seed=seed))
    return {"prompts": prompts, "samples": len(res), "reward_mean": round(float(rewards.mean()), 4),
            "exact_frac": round(float((rewards == 1.0).mean()), 4),
            "sampled_len_p50": float(np.median(lens)), "sampled_len_max": int(lens.max()),
            "task_answer_len_p50": task["p50"], "task_answer_len_p99": task["p99"],
            "task_answer_len_max": task["max"], "eval_s": round(time.perf_counter() - t0, 1)}


HELDOUT_SEED = 424_242  # count-task prompts for evaluation: a stream apart from RL (0) and warm-start (1_000_003)


def eval_score(model_dir: str | Path, *, prompts: int = 64, samples: int = 4, seed: int = HELDOUT_SEED,
               params=None, max_new_tokens: int = 320, temperature: float = 1.0, tokenizer=None) -> dict:
    """Mean count reward of a checkpoint on `prompts` fixed count-task prompts (seed `seed`), `samples`
    answers each at `temperature` with a fixed sampling seed: the same prompts and random stream for
    every checkpoint, so two checkpoints differ by their weights only. With max_low = 0 the task has
    few distinct prompts, so these prompts also occur in training: a fixed-prompt score, not held out."""
    import numpy as np
    from transformers import AutoTokenizer

    from dora.exec.logprobs import load_model
    from dora.exec.rewards import count_reward
    from dora.exec.tasks import CountTaskParams, count_task, tokenize_prompts
    from dora.exec.hf_rollout import hf_rollout

    tok = tokenizer or AutoTokenizer.from_pretrained(str(model_dir))
    model = load_model(model_dir)
    ex = count_task(prompts, seed=seed, params=params or CountTaskParams())
    res = hf_rollout(model, tok, tokenize_prompts(tok, ex), [e.prompt_id for e in ex], group_size=samples,
                     max_new_tokens=max_new_tokens, seed=seed, batch_size=128, temperature=temperature)
    rewards = np.array([count_reward(text, ex[t.group_id].answer) for t, text in res])
    return {"score": float(rewards.mean()), "exact": float((rewards == 1.0).mean()),
            "len_mean": float(np.mean([len(t.response_ids) for t, _ in res]))}


if __name__ == "__main__":
    raise SystemExit(main())
