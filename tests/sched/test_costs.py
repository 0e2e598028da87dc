"""DecodeCost: hand-computed steps and times."""

import pytest

from dora.sched.costs import DecodeCost

C = DecodeCost(base_s=1.0, expert_s=2.0, touch=0.5, per_seq_s=0.1, per_ctx_s=0.01, prefill_per_token_s=0.002,
               kv_base_s=0.5, kv_per_token_s=0.001)


def test_weights_read_grow_with_the_experts_touched():
    assert C.weights_s(1) == pytest.approx(2.0)  # 1 + 2·(1 − 0.5)
    assert C.weights_s(2) == pytest.approx(2.5)  # 1 + 2·(1 − 0.25)
    assert DecodeCost(base_s=1.0, expert_s=0.0).weights_s(64) == 1.0  # dense: the base only


def test_step_time_and_its_inverse():
    assert C.step_s(2, 100) == pytest.approx(3.7)  # 2.5 + 0.1·2 + 0.01·100
    # three steps of 2 sequences: context 100, 102, 104 → 3.70 + 3.72 + 3.74
    assert C.time_for(3, 2, 100, 1.0) == pytest.approx(11.16)
    assert C.time_for(3, 2, 100, 2.0) == pytest.approx(22.32)  # a slower instance
    assert C.steps_in(11.16, 2, 100, 1.0) == pytest.approx(3.0)
    assert C.steps_in(3.7, 2, 100, 1.0) == pytest.approx(1.0)
    assert C.steps_in(5.0, 0, 0, 1.0) == 0.0 and C.time_for(0, 2, 100, 1.0) == 0.0


def test_flat_context_cost_divides():
    flat = DecodeCost(base_s=0.5, expert_s=0.0, per_seq_s=0.0, per_ctx_s=0.0)
    assert flat.steps_in(3.0, 4, 1000, 1.0) == pytest.approx(6.0)


def test_kv_move():
    assert C.kv_move_s(1000) == pytest.approx(1.5)


def test_kv_ships_where_it_costs_fewer_sequence_seconds_than_a_reprefill():
    # 1,000 tokens: KV 0.5 + 1.0 = 1.5 s for the moved one; re-prefill 2.0 s (f = 1) for it and each resident
    assert C.kv_move_s(1000) == pytest.approx(1.5) and C.reprefill_s(1000, 1.0) == pytest.approx(2.0)
    assert C.kv_pays(1000, 0, 1.0)  # 1.5 <= 2.0
    assert not C.kv_pays(1000, 0, 0.5)  # a fast destination: 1.5 > 1.0
    assert C.kv_pays(1000, 1, 0.5)  # ... with a resident: 1.5 <= 2 x 1.0
    # 200 tokens: KV 0.7 s; re-prefill 0.4 s per sequence: the KV pays from one resident on
    assert not C.kv_pays(200, 0, 1.0) and C.kv_pays(200, 1, 1.0)


def test_a_batch_drains_as_its_trajectories_leave_it():
    d = DecodeCost(base_s=1.0, expert_s=0.0, per_seq_s=0.5, per_ctx_s=0.0)
    # 2 tokens with both running (2 s a step), then 3 with one (1.5 s a step): 4 + 4.5
    assert d.drain_s([(2.0, 0.0, True), (5.0, 0.0, True)], 1.0) == pytest.approx(8.5)
    assert d.time_for(5.0, 2, 0.0, 1.0) == pytest.approx(10.0)  # were both to run to the end
    # only the first counted: it finishes after 4 s, slowed by the other
    assert d.drain_s([(2.0, 0.0, True), (5.0, 0.0, False)], 1.0) == pytest.approx(4.0)
    assert d.drain_s([], 1.0) == 0.0
    c = DecodeCost(base_s=1.0, expert_s=0.0, per_seq_s=0.5, per_ctx_s=0.01)
    # 2 steps of 2 sequences from context 150: (1 + 1 + 1.5) + (1 + 1 + 1.52) = 7.02; the first
    # leaves with its 102 tokens, the other holds 52: one step of 1 + 0.5 + 0.52 = 2.02
    assert c.drain_s([(2.0, 100.0, True), (3.0, 50.0, True)], 1.0) == pytest.approx(9.04)
    assert c.drain_s([(2.0, 100.0, True), (3.0, 50.0, True)], 2.0) == pytest.approx(18.08)
