"""In-process RL pilot on the count task: the real Trainer (GRPO + decoupled PPO loss, AdamW) and
transformers-generate rollouts in one process, synchronous (every batch from the current weights).
Cheaper than benchmarks/exec_speedup.py (no engines, no Ray) for trying RL settings.

  python benchmarks/exec_rl_pilot.py MODEL_DIR [key=value ...]

MODEL_DIR is built first when missing (ws= warm-start steps, rev= reversed-answer fraction). Keys
(defaults in DEFAULTS): steps, B (prompts per step), G (samples per prompt), T (rollout temperature,
also of the score), tT (temperature the trainer scores at and the behaviour logprobs are taken at;
default T), lr, warmup, agg (token_mean | seq_mean_token_mean), mb (minibatches), epochs, clip,
b2 (Adam beta2), eval_every. Prints one line per step and the fixed-prompt score
(dora.exec.tiny_model.eval_score, 64 prompts x 4 samples) of the start and of every eval_every-th
version, then a SUMMARY line: training reward of the first and last fifth of the steps (mean, and
standard error of the last) and the scores.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DEFAULTS = dict(steps=50, B=16, G=8, T=1.0, tT=0.0, lr=1e-4, warmup=5, agg="seq_mean_token_mean", mb=1, epochs=1,
                ws=400, rev=0.0, eval_every=25, clip=1.0, b2=0.999, max_new_tokens=320)


def parse(argv: list[str]) -> tuple[str, dict]:
    from dora.errors import InputError

    if not argv:
        raise InputError("usage: benchmarks/exec_rl_pilot.py MODEL_DIR [key=value ...]")
    opts = dict(DEFAULTS)
    for kv in argv[1:]:
        key, sep, value = kv.partition("=")
        if not sep or key not in opts:
            raise InputError(f"{kv!r}: expected key=value with key one of {', '.join(opts)}")
        try:
            opts[key] = type(DEFAULTS[key])(value)
        except ValueError:
            raise InputError(f"{kv!r}: {value!r} is not a {type(DEFAULTS[key]).__name__}") from None
    return argv[0], opts


def main(argv: list[str] | None = None) -> int:
    from dora.errors import cli_errors

    with cli_errors("benchmarks/exec_rl_pilot.py"):
        model_dir, o = parse(sys.argv[1:] if argv is None else argv)
        run(model_dir, o)
    return 0


def run(model_dir: str, o: dict) -> None:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from dora.exec.config import LossConfig, TrainerConfig
    from dora.exec.rewards import count_reward
    from dora.exec.tasks import count_task, tokenize_prompts
    from dora.exec.tiny_model import build_tiny_model, eval_score
    from dora.exec.hf_rollout import hf_rollout
    from dora.exec.trainer import Trainer

    torch.set_num_threads(1)
    tT = o["tT"] or o["T"]
    if not Path(model_dir).is_dir():
        t0 = time.perf_counter()
        build_tiny_model(model_dir, warm_start_steps=o["ws"], warm_start_reverse_frac=o["rev"])
        print(f"built {model_dir} in {time.perf_counter() - t0:.0f} s", flush=True)
    tok = AutoTokenizer.from_pretrained(model_dir)
    snaps = Path(tempfile.mkdtemp(prefix="rl_pilot_"))
    cfg = TrainerConfig(device="cpu", lr=o["lr"], warmup_steps=o["warmup"], minibatches=o["mb"],
                        ppo_epochs=o["epochs"], temperature=tT, grad_clip=o["clip"], betas=(0.9, o["b2"]),
                        loss=LossConfig(aggregation=o["agg"]), snapshot_every=o["eval_every"], snapshot_dir=str(snaps))
    trainer = Trainer(model_dir, cfg)
    examples = count_task(4096, seed=0)
    ids = tokenize_prompts(tok, examples)

    def score(path) -> float:
        sc = eval_score(path, temperature=o["T"], tokenizer=tok, max_new_tokens=o["max_new_tokens"])["score"]
        print(f"  directions of {path}: {json.dumps(directions(path, tok, o['T'], o['max_new_tokens']))}", flush=True)
        return sc

    print("config", json.dumps(o), flush=True)
    evals = [(0, score(model_dir))]
    print(f"score v0 {evals[-1][1]:.3f}", flush=True)
    t0 = time.perf_counter()
    rewards = []
    for step in range(o["steps"]):
        sel = [(step * o["B"] + i) % len(ids) for i in range(o["B"])]
        rolled = hf_rollout(trainer.model, tok, [ids[i] for i in sel], sel, group_size=o["G"],
                            max_new_tokens=o["max_new_tokens"], seed=1000 + step, version=trainer.version,
                            temperature=o["T"], logprob_temperature=tT, batch_size=128)
        batch = []
        for traj, text in rolled:
            traj.reward = count_reward(text, examples[traj.group_id].answer)
            batch.append(traj)
        st = trainer.step(batch)
        rewards.append(st["reward_mean"])
        print(f"step {step + 1} reward {st['reward_mean']:.3f} len {st['response_len_mean']:.1f} "
              f"zero-var {st['zero_var_groups']:.2f} grad {st['grad_norm']:.3f} ({time.perf_counter() - t0:.0f} s)",
              flush=True)
        if o["eval_every"] and (step + 1) % o["eval_every"] == 0:
            evals.append((step + 1, score(snaps / f"v{step + 1}")))
            print(f"score v{step + 1} {evals[-1][1]:.3f}", flush=True)
    shutil.rmtree(snaps, ignore_errors=True)
    r = np.array(rewards)
    k = max(2, len(r) // 5)
    print(f"SUMMARY {json.dumps(o)} reward first{k} {r[:k].mean():.3f} last{k} {r[-k:].mean():.3f}"
          f"+-{r[-k:].std(ddof=1) / np.sqrt(k):.3f} score " + " ".join(f"v{s}:{e:.3f}" for s, e in evals)
          + f" wall {time.perf_counter() - t0:.0f} s", flush=True)


def directions(model_dir, tok, temperature: float, max_new_tokens: int) -> dict:
    """On the score's prompts and samples (eval_score's defaults), the share of multi-item answers that
    start with the prompt's first number ("prompt"), with its last ("reversed"), or otherwise ("other")."""
    from dora.exec.logprobs import load_model
    from dora.exec.tasks import count_task, tokenize_prompts
    from dora.exec.tiny_model import HELDOUT_SEED
    from dora.exec.hf_rollout import hf_rollout

    ex = count_task(64, seed=HELDOUT_SEED)
    res = hf_rollout(load_model(model_dir), tok, tokenize_prompts(tok, ex), [e.prompt_id for e in ex], group_size=4,
                     max_new_tokens=max_new_tokens, seed=HELDOUT_SEED, batch_size=128, temperature=temperature)
    kinds = []
    for traj, text in res:
        want, got = ex[traj.group_id].answer.split(), text.split()
        if len(want) > 1:
            first = got[0] if got else ""
            kinds.append("prompt" if first == want[0] else "reversed" if first == want[-1] else "other")
    return {k: round(kinds.count(k) / len(kinds), 3) for k in ("prompt", "reversed", "other")}


if __name__ == "__main__":
    sys.exit(main())
