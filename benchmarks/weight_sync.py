"""Weight-sync cost per update: collective vs tensors vs checkpoint, on Ray actors.

A trainer actor and `--engines` engine actors (hf or vLLM) of the tiny model (built here, or
--model DIR) do `--updates` updates each way; per update it prints the bytes moved and:
  publish_s  the trainer's side: collective = the broadcast to every engine (staged there),
             tensors = the state dict put in the object store, checkpoint = the directory written;
  load_s     the slowest engine's load call (collective: the swap from its stage; tensors: the
             object-store fetch + swap; checkpoint: the read + swap);
  total_s    publish_s + load_s: until every engine serves the new version.
Loads are issued one update at a time with no requests running ('drain'). Also the collective
layout itself (flat buffer per dtype vs one broadcast per tensor), trainer and 2 receivers as
threads of this process over gloo.

  python benchmarks/weight_sync.py                       # hf and vllm, 2 engines, 5 updates each
  python benchmarks/weight_sync.py --backends hf --updates 10 --json out.json
  python benchmarks/weight_sync.py --hidden-size 1024 --layers 8   # a 100 MB model
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def _bench_trainer():
    from dora.exec.trainer_actor import TrainerActor

    class BenchTrainer(TrainerActor):
        def next_version(self, version: int) -> None:
            """Stand-in for a step: move the weights a little and call it `version`."""
            import torch

            with torch.no_grad():
                for p in self.trainer.model.parameters():
                    p.add_(1e-3)
            self.trainer.version = version

    return BenchTrainer


def layout_bench(model: str, reps: int) -> dict:
    """Buckets (dora.exec.weight_sync.send, BUCKET_BYTES) vs one buffer per dtype vs one broadcast
    per tensor, 1 sender + 2 receivers (threads), gloo."""
    from dora.exec.config import TrainerConfig
    from dora.exec.trainer import Trainer
    from dora.exec.weight_sync import BUCKET_BYTES, WeightSender, WeightStage, _bcast, group_spec, make_group

    items = list(Trainer(model, TrainerConfig(device="cpu")).state_dict_for_publish().items())
    out: dict = {"tensors": len(items), "bytes": sum(t.numel() * t.element_size() for _, t in items)}

    def flat_with(bucket_bytes: int, generation: int):
        sender = WeightSender("gloo", bucket_bytes=bucket_bytes)
        spec = group_spec(sender.address(), generation, 3, 60)
        stages = [WeightStage(), WeightStage()]

        def flat(v: int) -> None:
            ts = [threading.Thread(target=stages[r - 1].receive, args=(spec, r, 0)) for r in (1, 2)]
            for t in ts:
                t.start()
            sender.broadcast(spec, v, v, lambda: items)
            for t in ts:
                t.join()
        return flat, sender

    buckets, sender = flat_with(BUCKET_BYTES, 1)
    per_dtype, _ = flat_with(2 ** 62, 3)
    groups: dict = {}
    spec2 = group_spec(sender.address(), 2, 3, 60)

    def per_tensor(_: int) -> None:
        import torch

        def recv(r: int) -> None:
            if r not in groups:
                groups[r] = make_group(spec2, r)
            pg = groups[r]
            for _, t in items:
                buf = torch.empty_like(t)
                if buf.numel():
                    _bcast(pg, buf)

        ts = [threading.Thread(target=recv, args=(r,)) for r in (1, 2)]
        for t in ts:
            t.start()
        if 0 not in groups:
            groups[0] = make_group(spec2, 0, sender._store)
        pg0 = groups[0]
        for _, t in items:
            if t.numel():
                _bcast(pg0, t)
        for t in ts:
            t.join()

    for name, fn in (("buckets_s", buckets), ("per_dtype_s", per_dtype), ("per_tensor_s", per_tensor)):
        fn(1)  # the group's rendezvous and the packing are not timed
        times = []
        for k in range(reps):
            t0 = time.perf_counter()
            fn(1)
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def run_backend(backend: str, model: str, engines: int, updates: int, work: Path) -> list[dict]:
    import ray

    from dora.exec.config import TrainerConfig
    from dora.exec.engine import EngineConfig
    from dora.exec.engine.actor import remote_engine
    from dora.exec.weight_sync import group_spec

    trainer = ray.remote(_bench_trainer()).options(num_cpus=0).remote(model, TrainerConfig(device="cpu", threads=1),
                                                                     str(work / backend))
    engs = [remote_engine(EngineConfig(model=model, backend=backend, device="cpu", max_num_seqs=8, max_model_len=256,
                                       seed=i, cpu_threads=1), instance=i, num_cpus=0) for i in range(engines)]
    ray.get([e.ready.remote() for e in engs])
    rows, v = [], 0
    addr = ray.get(trainer.weight_sync_address.remote("gloo"))
    spec = group_spec(addr, 1, engines + 1, 300)
    for mode in ("collective", "tensors", "checkpoint"):
        for k in range(updates + 1):  # the first update of each mode (group rendezvous, warm-up) is not kept
            v += 1
            ray.get(trainer.next_version.remote(v))
            t0 = time.perf_counter()
            if mode == "collective":
                recv = [e.receive_weights.remote(spec, r, v - 1) for r, e in enumerate(engs, 1)]
                sent = ray.get(trainer.broadcast_weights.remote(spec, v, "float32"))
                ray.get(recv)
                nbytes = sent["bytes"]
            elif mode == "tensors":
                ref = trainer.weights.remote()
                ray.wait([ref])
                src = ref
            else:
                src = ray.get(trainer.save_weights.remote(v))
            t1 = time.perf_counter()
            if mode == "collective":
                calls = [e.load_staged.remote(v, "drain") for e in engs]
            elif mode == "tensors":
                calls = [e.load_weights.remote(v, src, "drain") for e in engs]
            else:
                calls = [e.load_checkpoint.remote(v, src, "drain") for e in engs]
            ray.get(calls)
            t2 = time.perf_counter()
            if mode == "tensors":
                nbytes = sum(t.numel() * t.element_size() for t in ray.get(src).values())
            elif mode == "checkpoint":
                nbytes = sum(f.stat().st_size for f in Path(src).glob("*.safetensors"))
            if k:
                rows.append({"backend": backend, "mode": mode, "version": v, "bytes": int(nbytes),
                             "publish_s": t1 - t0, "load_s": t2 - t1, "total_s": t2 - t0})
                print(f"{backend:5s} {mode:10s} v{v:<3d} {nbytes:>10,d} B  publish {t1 - t0:.4f} s  "
                      f"load {t2 - t1:.4f} s  total {t2 - t0:.4f} s", flush=True)
    for e in engs:
        ray.get(e.close.remote())
        ray.kill(e)
    ray.kill(trainer)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="", help="checkpoint dir (default: the tiny model, built here)")
    ap.add_argument("--backends", default="hf,vllm")
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--hidden-size", type=int, default=64, help="the built model's width (heads of 64 above 64)")
    ap.add_argument("--layers", type=int, default=2, help="the built model's layers")
    ap.add_argument("--layout-only", action="store_true", help="only the layout comparison (no engines)")
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = a.model
        if not model:
            from dora.exec.tiny_model import build_tiny_model

            h = a.hidden_size
            model = str(build_tiny_model(work / "model", seed=0, hidden_size=h, layers=a.layers,
                                         heads=max(2, h // 64), intermediate_size=2 * h))
        layout = layout_bench(model, reps=20)
        print(f"layout ({layout['tensors']} tensors, {layout['bytes']:,} B, 2 receivers, median of 20): "
              f"buckets {layout['buckets_s'] * 1e3:.2f} ms, one buffer per dtype {layout['per_dtype_s'] * 1e3:.2f} ms, "
              f"one broadcast per tensor {layout['per_tensor_s'] * 1e3:.2f} ms", flush=True)
        if a.layout_only:
            return 0
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
        rows = []
        try:
            for b in [x for x in a.backends.split(",") if x]:
                rows += run_backend(b, model, a.engines, a.updates, work)
        finally:
            ray.shutdown()
    import os

    load = os.getloadavg()[0]
    print(f"\nmedian per update (s), host load average {load:.1f}: backend mode bytes publish load total")
    summary = []
    for b in dict.fromkeys(r["backend"] for r in rows):
        for m in ("collective", "tensors", "checkpoint"):
            rs = [r for r in rows if r["backend"] == b and r["mode"] == m]
            s = {"backend": b, "mode": m, "bytes": rs[0]["bytes"],
                 **{k: statistics.median(r[k] for r in rs) for k in ("publish_s", "load_s", "total_s")}}
            summary.append(s)
            print(f"  {b:5s} {m:10s} {s['bytes']:>10,d}  {s['publish_s']:.4f}  {s['load_s']:.4f}  {s['total_s']:.4f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"layout": layout, "updates": rows, "summary": summary,
                                            "engines": a.engines, "host_loadavg_1m": load}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
