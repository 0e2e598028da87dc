"""Migration of a running trajectory between two engines: with its KV cache vs by re-prefill.

Two engines of one backend (--backend hf: in this process; vllm: AsyncLLM engines with the
DoraKVConnector and a shared store directory) of one model (the tiny model built here with --hidden-size and
--layers, or --model DIR). For each context length, a greedy request with a prompt of that many
tokens runs on engine A until it has generated --generated tokens, then moves to engine B:
  kv         A.export_kv -> pickled and unpickled (as through Ray's object store) -> B.import_kv
             (vllm: the K/V go through the store directory, the state carries its key)
  reprefill  A.abort -> B.submit(prompt + generated so far): B prefills the whole context
and for each it prints the bytes that cross (the K/V tensors, pickled; vllm: the saved blocks'
file) and the seconds from the move's start until B has produced its next token. Each is
checked: the finished output equals an uninterrupted greedy run on A, token for token (both
paths), and the kv path re-prefills nothing on B (hf: no prefill batch either). Median of
--reps moves per point.

  python benchmarks/kv_migration.py                                   # tiny model (hidden 64, 2 layers)
  python benchmarks/kv_migration.py --hidden-size 512 --layers 8 --json out.json
  python benchmarks/kv_migration.py --backend vllm --hidden-size 512 --layers 8
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _wait(engine, rid: str, n: int, timeout: float = 300.0):
    """Poll until `rid` has >= n generated tokens (peek) and return the time it got there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = engine.peek(rid)
        if snap is not None and len(snap.token_ids) >= n:
            return time.perf_counter()
        time.sleep(0.0005)
    raise RuntimeError(f"{rid}: fewer than {n} tokens after {timeout} s")


def _finish(engine, rid: str, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in engine.poll(timeout=0.2):
            if r.request_id == rid:
                return r
    raise RuntimeError(f"{rid}: not finished after {timeout} s")


def move_once(a, b, prompt: list[int], total: int, generated: int, how: str, rid: str) -> dict:
    """Run `prompt` greedily on A to `generated` tokens, move it to B (`how`), finish it there."""
    from dora.exec.engine import GenRequest, SamplingConfig

    greedy = SamplingConfig(temperature=0.0)
    a.submit(GenRequest(rid, prompt, total, a.version, greedy, stop_token_ids=()))
    _wait(a, rid, generated)
    prefills = len(b.get_stats()["prefills"])
    t0 = time.perf_counter()
    if how == "kv":
        blob = pickle.dumps(a.export_kv(rid))
        state = pickle.loads(blob)
        n = len(state.part.token_ids)
        size = len(blob)
        if state.handle is not None:  # vllm: the K/V wait in the store
            size += sum(f.stat().st_size for f in (Path(a.cfg.kv_store) / state.handle[0]).iterdir())
        b.import_kv(state)
    else:
        part = a.abort(rid)
        n = len(part.token_ids)
        blob = pickle.dumps(part)
        size = len(blob)
        b.submit(GenRequest.resume(pickle.loads(blob), total, greedy, stop_token_ids=()))
    t1 = _wait(b, rid, n + 1)
    res = _finish(b, rid)
    return {"s_to_next_token": t1 - t0, "bytes": size, "moved_at": n, "tokens": res.token_ids,
            "b_prefills": len(b.get_stats()["prefills"]) - prefills, "reprefill": res.reprefill_tokens}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/kv_migration.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    ap.add_argument("--model", help="an HF checkpoint directory (default: a tiny model built here)")
    ap.add_argument("--hidden-size", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--contexts", type=int, nargs="+", default=[64, 256, 768], help="prompt lengths (tokens)")
    ap.add_argument("--generated", type=int, default=16, help="tokens generated on A before the move")
    ap.add_argument("--total", type=int, default=48, help="max_new_tokens of the request")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per engine")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    if a.generated < 1 or a.total <= a.generated + 1 or a.reps < 1 or min(a.contexts) < 1:
        ap.error("need --generated >= 1, --total > --generated + 1, --reps >= 1 and contexts >= 1")
    from dora.exec.engine import EngineConfig, GenRequest, SamplingConfig, make_engine

    with tempfile.TemporaryDirectory() as tmp:
        model = a.model
        if model is None:
            from dora.exec.tiny_model import build_tiny_model

            model = str(build_tiny_model(Path(tmp) / "model", seed=0, hidden_size=a.hidden_size, layers=a.layers,
                                         intermediate_size=2 * a.hidden_size))
        kw = {"cpu_threads": a.threads} if a.backend == "hf" else {"kv_store": str(Path(tmp) / "kv_store")}
        if a.backend == "vllm":
            Path(kw["kv_store"]).mkdir()
        cfg = EngineConfig(model=model, backend=a.backend, device="cpu", dtype="float32", max_num_seqs=8,
                           max_model_len=max(a.contexts) + a.total + 8, seed=0, enable_prefix_caching=False, **kw)
        eng_a, eng_b = make_engine(cfg), make_engine(cfg)
        rows = []
        try:
            for ctx in a.contexts:
                prompt = [60 + (i % 200) for i in range(ctx)]
                eng_a.submit(GenRequest("ref", prompt, a.total, eng_a.version, SamplingConfig(temperature=0.0),
                                        stop_token_ids=()))
                ref = _finish(eng_a, "ref").token_ids
                for how in ("kv", "reprefill"):
                    runs = [move_once(eng_a, eng_b, prompt, a.total, a.generated, how, f"{how}{ctx}.{r}")
                            for r in range(a.reps)]
                    same = all(r["tokens"] == ref for r in runs)
                    row = {"context": ctx, "how": how, "moved_at_tokens": runs[0]["moved_at"],
                           "bytes": runs[0]["bytes"],
                           "s_to_next_token": statistics.median(r["s_to_next_token"] for r in runs),
                           "prefills_on_b": max(r["b_prefills"] for r in runs) if a.backend == "hf" else None,
                           "reprefill_tokens_on_b": max(r["reprefill"] for r in runs), "token_for_token": same}
                    rows.append(row)
                    print(f"context {ctx:>5}  {how:<9}  {row['bytes']:>11,} B  next token after "
                          f"{row['s_to_next_token'] * 1e3:8.1f} ms  re-prefilled on B {row['reprefill_tokens_on_b']}  "
                          f"same output {same}", flush=True)
                    if not same:
                        print(f"error: the {how} move changed the greedy output at context {ctx}", file=sys.stderr)
                        return 1
        finally:
            eng_a.close()
            eng_b.close()
    if a.json:
        Path(a.json).write_text(json.dumps({"backend": a.backend, "hidden_size": a.hidden_size, "layers": a.layers,
                                            "model": a.model,
                                            "generated": a.generated, "reps": a.reps, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
