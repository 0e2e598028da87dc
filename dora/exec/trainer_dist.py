"""torch.distributed inside one trainer rank: FSDP2 sharding, summed statistics, full state dicts.

Used by `dora.exec.trainer.Trainer` when a process group of world size > 1 is initialised
(`dora.exec.trainer_group` forms it). FSDP2 (`fully_shard` per decoder layer, then the root) on
a 1-D DeviceMesh of the group's device type: gloo over CPU tensors, NCCL over CUDA ones. Full
state dicts are gathered to rank 0 (the other ranks get empty dicts).
"""

from __future__ import annotations

import torch


def world() -> tuple[int, int]:
    """(rank, world size) of the initialised process group; (0, 1) without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def shard(model: torch.nn.Module, device: torch.device, bf16: bool) -> None:
    """FSDP2: shard each decoder layer, then the root, over every rank of the group; bf16 compute
    when `bf16` (CUDA), fp32 gradient reduction."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else torch.float32, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def sum_over_ranks(n: float, device: torch.device, op=None) -> float:
    """`n` reduced over the ranks (sum, or `op`)."""
    t = torch.tensor([n], device=device, dtype=torch.float64)
    torch.distributed.all_reduce(t, op=op or torch.distributed.ReduceOp.SUM)
    return float(t.item())


def add_over_ranks(sums: dict[str, float]) -> dict[str, float]:
    """Summable statistics of every rank added key by key (a rank that trained nothing sends {})."""
    got: list[dict[str, float] | None] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(got, sums)
    out: dict[str, float] = {}
    for part in got:
        for k, v in (part or {}).items():
            out[k] = out.get(k, 0.0) + v
    return out


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) model state on CPU at rank 0; {} on the other ranks. Every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The full optimizer state (parameter names as keys) on CPU at rank 0; {} elsewhere. Every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, weights: dict[str, torch.Tensor],
                    optim: dict) -> None:
    """Every rank loads the full model and optimizer state; each keeps its own shard."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_optimizer_state_dict)

    opts = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, weights, options=opts)
    set_optimizer_state_dict(model, optimizer, optim, options=opts)
