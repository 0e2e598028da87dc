"""Measure a rollout engine: start-up, decode throughput at given concurrencies, weight-update
times (in-memory tensors and checkpoint directory), and per-step timings for calibration.

  python -m dora.exec.engine.bench --backend vllm --concurrency 16 64 --tokens 256 [--model DIR] [--json OUT]

Without --model the default tiny checkpoint is built in a temporary directory. Throughput is
generated tokens / wall seconds from submitting N requests of --tokens tokens each (no stop
tokens) to the last one finishing, after one first round (`first_round_s`: with
--warm-up-requests 0 it shows the one-off cost of an engine's first forward that make_engine's
warm-up otherwise pays at start-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dora.errors import InputError, cli_errors


def _run_batch(engine, n: int, tokens: int, tag: str, prompt_len: int) -> float:
    from dora.exec.engine import GenRequest, SamplingConfig

    prompt = [40 + (i % 20) for i in range(prompt_len)]
    t0 = time.perf_counter()
    engine.submit_many(GenRequest(f"{tag}-{i}", prompt, tokens, engine.version, SamplingConfig(),
                                  stop_token_ids=()) for i in range(n))
    left = n
    while left:
        left -= len(engine.poll(timeout=1.0))
    return time.perf_counter() - t0


def _check(engine, ref, prompt_len: int) -> float:
    """Perturb `ref`, load it as a new version, sample 4 sequences; max |engine - trainer| logprob."""
    import torch

    from dora.exec.engine import GenRequest, SamplingConfig
    from dora.exec.logprobs import sequence_logprobs

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.02)
    engine.load_weights(engine.version + 1, ref.state_dict())
    prompt = [40 + (i % 20) for i in range(prompt_len)]
    engine.submit_many(GenRequest(f"check-{i}", prompt, 64, engine.version, SamplingConfig(seed=i), stop_token_ids=())
                       for i in range(4))
    res = []
    while len(res) < 4:
        res += engine.poll(timeout=1.0)
    ref_lp = sequence_logprobs(ref, [r.prompt_ids + r.token_ids for r in res], [len(prompt)] * 4)
    return max(float((torch.tensor(r.logprobs) - lp).abs().max()) for r, lp in zip(res, ref_lp))


def bench(model: str, backend: str, concurrency: list[int], tokens: int, device: str, dtype: str,
          prompt_len: int, load_repeats: int, check: bool = False, cpu_threads: int = 0,
          warm_up_requests: int = 2) -> dict:
    import torch

    from dora.exec.engine import EngineConfig, make_engine
    from dora.exec.logprobs import load_model

    cfg = EngineConfig(model=model, backend=backend, device=device, dtype=dtype, max_num_seqs=max(concurrency),
                       max_model_len=prompt_len + tokens + 8, cpu_threads=cpu_threads,
                       warm_up_requests=warm_up_requests)
    print(f"[bench] starting {backend} engine on {model} ...", flush=True)
    t0 = time.perf_counter()
    engine = make_engine(cfg)
    out: dict = {"backend": backend, "model": model, "device": device, "dtype": dtype, "tokens": tokens,
                 "cpu_threads": cpu_threads, "warm_up_requests": warm_up_requests,
                 "prompt_len": prompt_len, "startup_s": round(time.perf_counter() - t0, 2), "throughput": {}}
    print(f"[bench] start-up {out['startup_s']} s", flush=True)
    try:
        out["first_round_s"] = round(_run_batch(engine, min(concurrency), min(tokens, 32), "warm", prompt_len), 3)
        print(f"[bench] first round ({min(concurrency)} requests of {min(tokens, 32)} tokens): "
              f"{out['first_round_s']} s", flush=True)
        for n in concurrency:
            first_step = len(engine.stats.steps)
            wall = _run_batch(engine, n, tokens, f"c{n}", prompt_len)
            steps = [r for r in engine.stats.steps[first_step:] if r[1] == n and r[5] > 0]
            row = {"sequences": n, "wall_s": round(wall, 3), "tokens_per_s": round(n * tokens / wall, 1),
                   "decode_step_ms_median": round(1e3 * statistics.median(r[5] for r in steps), 3) if steps else None,
                   "timed_steps": len(steps)}
            out["throughput"][str(n)] = row
            print(f"[bench] {n:4d} sequences: {row['tokens_per_s']:9.1f} tokens/s "
                  f"(step {row['decode_step_ms_median']} ms at full batch, wall {row['wall_s']} s)", flush=True)
        ref = load_model(model, device="cpu", dtype=getattr(torch, dtype))
        state = {k: v.clone() for k, v in ref.state_dict().items()}
        loads = {"tensors": [], "checkpoint": []}
        for _ in range(load_repeats):
            loads["tensors"].append(engine.load_weights(engine.version + 1, state))
            loads["checkpoint"].append(engine.load_checkpoint(engine.version + 1, model))
        out["weight_load_s"] = {k: round(statistics.median(v), 4) for k, v in loads.items()}
        print(f"[bench] weight load (median of {load_repeats}): {out['weight_load_s']}", flush=True)
        if check:
            out["check_max_abs_diff"] = _check(engine, ref, prompt_len)
            print(f"[bench] engine vs trainer logprobs after a tensor update: max abs diff "
                  f"{out['check_max_abs_diff']:.2e}", flush=True)
        out["stats"] = {"steps": len(engine.stats.steps), "prefills": engine.stats.prefills[-50:]}
    finally:
        engine.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dora.exec.engine.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("vllm", "hf"), default="vllm")
    ap.add_argument("--model", default="", help="checkpoint directory or hub id (default: build the tiny model)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--tokens", type=int, default=256, help="generated tokens per request")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--device", default="auto", help="hf backend: auto | cpu | cuda")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--cpu-threads", type=int, default=0, help="hf on CPU: torch threads (0: torch default)")
    ap.add_argument("--load-repeats", type=int, default=3)
    ap.add_argument("--warm-up-requests", type=int, default=2,
                    help="throwaway requests at start-up (0: none; the first round then pays the first forward)")
    ap.add_argument("--check", action="store_true", help="also check engine vs trainer logprobs after an update")
    ap.add_argument("--json", default="", help="write the figures here")
    args = ap.parse_args(argv)
    with cli_errors("python -m dora.exec.engine.bench"):
        if args.warm_up_requests < 0:
            raise InputError(f"--warm-up-requests: must be >= 0, got {args.warm_up_requests}")
        if any(n < 1 for n in args.concurrency) or args.tokens < 1 or args.prompt_len < 1:
            raise InputError(f"--concurrency, --tokens and --prompt-len: each must be >= 1, got {args.concurrency}, "
                             f"{args.tokens}, {args.prompt_len}; pass 1 or more")
        with tempfile.TemporaryDirectory() as tmp:
            model = args.model
            if not model:
                from dora.exec.tiny_model import build_tiny_model

                model = str(build_tiny_model(Path(tmp) / "tiny"))
            res = bench(model, args.backend, args.concurrency, args.tokens, args.device, args.dtype,
                        args.prompt_len, args.load_repeats, args.check, args.cpu_threads, args.warm_up_requests)
        text = json.dumps(res, indent=1)
        if args.json:
            Path(args.json).write_text(text + "\n")
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
