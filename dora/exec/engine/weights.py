"""Weight-update helpers shared by the backends: named tensors in memory or a checkpoint
directory, and a byte packing that crosses vLLM's collective_rpc (msgpack) intact."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from dora.errors import InputError

Packed = list[tuple[str, str, list[int], bytes]]


def read_checkpoint(path: str | Path) -> list[tuple[str, Any]]:
    """(name, tensor) pairs of every *.safetensors file in a HF checkpoint directory (CPU)."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise InputError(f"checkpoint {path}: no *.safetensors files; save it with save_pretrained(safe_serialization=True)")
    out: list[tuple[str, Any]] = []
    for f in files:
        out.extend(load_file(str(f), device="cpu").items())
    return out


def pack_tensors(items: Iterable[tuple[str, Any]]) -> Packed:
    """(name, dtype, shape, raw bytes) per tensor. vLLM's utility-call path turns bare tensors
    into lists, so tensors cross to the engine-core worker as bytes (one copy)."""
    import torch

    out: Packed = []
    for name, t in items:
        if not isinstance(t, torch.Tensor):
            raise InputError(f"weights: {name!r} is a {type(t).__name__}, not a torch.Tensor")
        t = t.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        out.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), raw))
    return out


def unpack_tensors(packed: Packed) -> list[tuple[str, Any]]:
    import torch

    out = []
    for name, dtype, shape, raw in packed:
        dt = getattr(torch, dtype)
        if raw:
            t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(shape)
        else:
            t = torch.empty(shape, dtype=dt)
        out.append((name, t))
    return out
