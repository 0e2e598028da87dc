"""Trainer step time with 1 process and with N FSDP2 ranks (one gloo group on CPU, NCCL on CUDA).

Each rank count runs in fresh processes (torch.multiprocessing spawn); every rank takes the same
random batches (16 groups of 4, prompts of 10 tokens, responses of 5-200 tokens). Prints the
median of the steps after the first. No timing is asserted anywhere; this only measures.

  python benchmarks/trainer_ranks.py --model /tmp/tiny                  # 1 vs 2 ranks, CPU, 1 thread each
  python benchmarks/trainer_ranks.py --model /tmp/tiny --ranks 1 2 4 --steps 10 --device cuda
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


def _batch(seed: int, version: int):
    from dora.exec.trainer import Trajectory

    rng = random.Random(seed)
    out = []
    for g in range(16):
        prompt = [rng.randrange(4, 300) for _ in range(10)]
        for _ in range(4):
            resp = [rng.randrange(4, 300) for _ in range(rng.randint(5, 200))]
            out.append(Trajectory(prompt, resp, [-5.0] * len(resp), version, g, rng.random(), len(out)))
    return out


def _rank(rank: int, world: int, address: str, args, queue) -> None:
    import torch

    from dora.exec.config import TrainerConfig
    from dora.exec.trainer import Trainer
    from dora.exec.trainer_group import join_group

    if world > 1:
        join_group(address, rank, world, args.device)
    trainer = Trainer(args.model, TrainerConfig(device=args.device, threads=args.threads))
    times = []
    for s in range(args.steps + 1):
        batch = _batch(s, trainer.version)
        t0 = time.perf_counter()
        trainer.step(batch)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        queue.put(times[1:])
    if world > 1:
        torch.distributed.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    from dora.exec.trainer_group import free_address

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="local HF checkpoint (python -m dora.exec.tiny_model --out DIR)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=5, help="timed steps (after one untimed)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    for world in args.ranks:
        queue = ctx.Queue()
        address = free_address()
        procs = [ctx.Process(target=_rank, args=(r, world, address, args, queue)) for r in range(world)]
        for p in procs:
            p.start()
        times = queue.get()
        for p in procs:
            p.join()
        print(f"ranks={world}: median step {statistics.median(times):.3f} s "
              f"({', '.join(f'{t:.2f}' for t in times)})", flush=True)


if __name__ == "__main__":
    main()
