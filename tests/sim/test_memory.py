"""Decode slots and KV capacity from memory (dora.sim.memory), against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from dora.errors import InputError
from dora.sim import memory
from dora.sim.presets import HARDWARE
from tests.conftest import small_config, write_lengths


def test_qwen25_7b_on_one_h100():
    # W = 2 x 7,615,616,512 B = 15.2312 GB (the preset's parameter count, one device);
    # activations: 16,384 tokens x (2 x 18,944) x 2 B + 1,024 x 152,064 x 4 B = 1.8644 GB, + 1 GB of graphs;
    # KV: 0.9 x 80 - 15.2312 - 2.8644 = 53.9044 GB over 2 x 28 layers x 4 heads x 128 x 2 B = 57,344 B per token
    s = memory.size("H100", "qwen2.5-7b", 1, mean_context=3000.0)
    want = int((72.0 - 2 * 7.615616512 - 2.864368128) * 1e9 / 57344)
    assert s.kv_tokens == want == 940_018
    assert s.cap == 1024 and s.max_seqs == 313  # 940,018 // 3,000
    assert s.per_device_gb["activations"] == pytest.approx(2.864368128)


def test_qwen3_moe_on_two_h800():
    # 2 devices: weights and activations halve; 4 KV heads split over 2 devices: 98,304 / 2 B per token
    s = memory.size("H800", "qwen3-30b-a3b", 2, mean_context=100.0)
    from dora.sim.presets import MODELS

    w = MODELS["qwen3-30b-a3b"].params_b * 2 / 2
    acts = (16384 * 12288 * 2 + 1024 * 151936 * 4) / 2 / 1e9 + 1.0
    assert acts == pytest.approx(1.51249152)
    assert s.kv_tokens == int((72.0 - w - acts) * 1e9 / 49152)
    assert s.max_seqs == 1024  # the KV holds more than 1,024 contexts of 100 tokens: vLLM's cap


def test_a100_gets_vllm_smaller_defaults_and_mla_is_replicated():
    assert memory.vllm_defaults(HARDWARE["A100"]) == (256, 8192)
    assert memory.vllm_defaults(HARDWARE["H20"]) == (1024, 16384)
    s8 = memory.size("H800", "longcat-flash", 16, 1000.0)
    s16 = memory.size("H800", "longcat-flash", 32, 1000.0)
    assert s16.kv_tokens > s8.kv_tokens  # more devices: less weight per device, the same latent per token


def test_no_room_is_refused():
    with pytest.raises(InputError, match="leave no room for a KV cache"):
        memory.size("H800", "longcat-flash", 8, 1000.0)  # 1,120 GB of weights over 8 x 80 GB


def test_auto_in_a_run(tmp_path):
    t = write_lengths(tmp_path / "t.parquet", [[100, 200, 300, 400]] * 8, prompt_len=50)
    cfg = small_config(t, **{"cluster.max_seqs": 0, "cluster.kv_tokens": 0, "cluster.hardware": "H100",
                             "cluster.model": "qwen2.5-7b", "cluster.devices_per_instance": 1})
    from dora.trace import load_trace

    resolved, line = memory.resolve(cfg, load_trace(t))
    assert resolved.cluster.kv_tokens == 940_018
    assert resolved.cluster.max_seqs == 1024  # 940,018 / 300 mean context: the cap binds
    assert line.startswith("memory (H100 x 1, qwen2.5-7b): per device 72.0 GB usable")
    same, none = memory.resolve(resolved, load_trace(t))
    assert same is resolved and none is None
    assert np.isclose(float(load_trace(t).response_len.mean()), 250.0)
