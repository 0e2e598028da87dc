"""dora's spread starts, hand-computed: at light load a new group waits for instances about to
serve the newest version when it finishes sooner there, and never overflows KV memory."""

from __future__ import annotations

from dora.config import build
from dora.sched import events as E
from dora.sched.config import PolicyConfig
from dora.sched.costs import DecodeCost
from dora.sched.policies.dora import DoraPolicy

# a decode step of n sequences: 0.005 + 0.005·n s (no context term), so t tokens take t·(0.005 + 0.005·n)
COST = DecodeCost(base_s=0.005, expert_s=0.0, per_seq_s=0.005, per_ctx_s=0.0, weight_load_s=1.0)
TOTAL = 1000  # predicted length of every sample (its group-mates' median)


def _policy(eta: int = 1, kv_tokens: int = 10**6, cohort_check: bool = True, loading: int = 2,
            waiting: int = 2) -> DoraPolicy:
    """Instance 0 serves the newest version (1) with 4 of its 8 slots busy; instances 1 and 2
    (1..`loading`) are loading it (they serve nothing yet); `waiting` groups of 4 samples wait,
    prompts of 10 tokens."""
    cfg = build(PolicyConfig, {"batch_size": 1, "group_size": 4, "eta": eta, "dora": {"cohort_check": cohort_check}})
    pol = DoraPolicy(cfg)
    specs = tuple(E.InstanceSpec(i, 8, kv_tokens) for i in range(1 + loading))
    pol.handle(E.ClusterStarted(specs, 1, cost=COST), 0.0)
    v = pol.view
    v.latest_version = 1
    v.instances[0].versions = {1}
    for i in range(1, 1 + loading):
        v.instances[i].versions = set()
        v.instances[i].loading = 1
    g = v.add_group(100, 4, 10, 0.0)
    v.open_group(g, 1)
    for k in range(4):
        v.new_traj(g, k, 1, 0, 0.0)  # sample k, version 1, on instance 0
    pol.backlog.clear()
    pol.index_all()
    assert len(v.instances[0].active) == 4 and pol.pool_free == 4
    for pid in range(1, 1 + waiting):
        pol.backlog.append(v.add_group(pid, 4, 10, 0.0))
        pol.pred.mates[pid] = [TOTAL]
    return pol


def test_a_group_waits_only_for_a_finish_at_least_a_fifth_sooner():
    pol = _policy()
    g = pol.backlog[0]
    assert pol._slots_spare()  # the cap, (1 + eta + 1) x B = 3 groups of 4, is below the 24 slots
    # demand: 4 residents + 2 waiting groups x 4 = 12 samples. Now, on instance 0 alone: 8 at a
    # time (its slots): 1000 x (0.005 + 0.040) = 45 s.
    assert pol._spread_s(12 / 1, 8, TOTAL, 10) == 45.0
    # instance 1 ready in 2 s: 12 over 2 instances, 6 each: 2 + 1000 x 0.035 = 37 s, not below 0.8 x 45 = 36 s
    pol._ready_at = {1: 2.0}
    assert not pol._wait_pays(g, 8, TOTAL)
    assert pol.place(g) is not None
    # instance 2 ready in 3 s as well: 12 over 3, 4 each: 3 + 1000 x 0.025 = 28 s < 36 s: wait
    pol._ready_at = {1: 2.0, 2: 3.0}
    assert pol._wait_pays(g, 8, TOTAL)
    assert pol.place(g) is None


def test_a_group_waits_for_instances_beyond_the_first_eight_to_come():
    """Ten groups wait: demand 4 + 10 x 4 = 44 samples, 45 s now (8 at a time on instance 0).
    Forty instances come in 20 s. Spread over the first 8 (and the pool), 44 / 9 = 4.9 each:
    20 + 1000 x (0.005 + 0.005 x 4.9) = 49.4 s; over the first 16, 44 / 17: 37.9 s; neither below
    0.8 x 45 = 36 s. Over the first 32, 44 / 33 = 1.33 each: 20 + 11.7 = 31.7 s: wait."""
    pol = _policy(loading=40, waiting=10)
    pol._ready_at = {i: 20.0 for i in range(1, 41)}
    g = pol.backlog[0]
    assert pol._spread_s(44 / 9, 8, TOTAL, 10) + 20.0 > 36.0 and pol._spread_s(44 / 17, 8, TOTAL, 10) + 20.0 > 36.0
    assert pol._spread_s(44 / 33, 8, TOTAL, 10) + 20.0 < 36.0
    assert pol._wait_pays(g, 8, TOTAL)
    pol._ready_at = {i: 20.0 for i in range(1, 17)}  # only 16 come
    assert not pol._wait_pays(g, 8, TOTAL)


def test_no_spreading_when_the_slots_bind():
    pol = _policy(eta=4)  # the cap admits (1 + 4 + 1) x 1 group x 4 = 24 samples: every slot
    pol._ready_at = {1: 2.0, 2: 3.0}
    assert not pol._slots_spare()
    assert pol.place(pol.backlog[0]) is not None


def test_finished_groups_waiting_for_the_trainer_take_no_slots():
    """The cap admits 24 samples, every slot (above); two of its six groups have finished and
    wait for the trainer: the 4 x 4 = 16 samples left to decode leave slots to spare."""
    pol = _policy(eta=4)
    v = pol.view
    for pid in (7, 8):
        g = v.add_group(pid, 4, 10, 0.0)
        v.open_group(g, 1)
        for k in range(4):
            v.finish_traj(v.new_traj(g, k, 1, 0, 0.0).id, 100, 1.0)
    assert len(v.buffer) == 2
    assert pol._slots_spare()


def test_a_group_is_not_packed_beyond_the_predicted_kv():
    # (4 residents + 4) x (10 + 1000) predicted context tokens = 8,080 > 8,000 KV tokens
    pol = _policy(kv_tokens=8000)
    assert pol.place(pol.backlog[0]) is None
    pol = _policy(kv_tokens=8080)
    assert pol.place(pol.backlog[0]) is not None


def test_spread_starts_off_places_at_once():
    pol = _policy(kv_tokens=8000)
    pol.dc.spread_starts = False
    pol._ready_at = {1: 2.0, 2: 3.0}
    assert pol.place(pol.backlog[0]) is not None


def test_consolidations_bound_falls_back_to_three_times_made_where_few_tails_were_seen():
    """`remaining(bound=True)`: the history's 90th percentile beyond what a trajectory has made,
    but at least 3x what it has made + 1 while fewer than 10 finished lengths exceed it (the
    version's running trajectories not consulted: tests/sched/test_cohort.py has that check)."""
    pol = _policy(cohort_check=False)
    for _ in range(20):
        pol.pred.observe(7, 100, 0, 1.0)
    for _ in range(5):
        pol.pred.observe(7, 1000, 0, 1.0)
    pol.prog.join(50, 1, 10, 200.0, pol.now)  # trajectory 50 has made 200 tokens (instance 1)
    pol.prog.join(51, 1, 10, 500.0, pol.now)  # and 51 has made 500
    # 5 lengths beyond 200, all 1000: q90 remainder 800, above 3 x 200 + 1 = 601
    assert pol.remaining(50, True) == 800.0 and pol.remaining(50, True, bound=True) == 800.0
    # beyond 500: q90 remainder 500, below 3 x 500 + 1 = 1501: the fallback
    assert pol.remaining(51, True) == 500.0 and pol.remaining(51, True, bound=True) == 1501.0
    for _ in range(10):
        pol.pred.observe(7, 1000, 0, 1.0)
    pol.pred._resort()
    assert pol.pred.count_above(500.0) == 15  # enough for a 90th percentile: the history alone
    assert pol.remaining(51, True, bound=True) == 500.0


def _consolidation(dl_after_s: float, prefill_per_token_s: float = 5.592e-6):
    """What `_safe_destination` picks in `_consolidation_policy`'s case, the trainer's deadline
    `dl_after_s` from now."""
    pol = _consolidation_policy(prefill_per_token_s)
    return pol._safe_destination(0, pol.view.instances[1], pol.now + dl_after_s)


def _consolidation_policy(prefill_per_token_s: float = 5.592e-6) -> DoraPolicy:
    """Instances 1 (source, half as fast: f = 2) and 2 (destination) serve the old version 0;
    instance 0 the newest. Decode step of n: 0.05 + 0.005·n s. Every finished length so far is
    2000, so a trajectory that has made g tokens has 2000 - g left (20 lengths beyond it: no
    fallback). The source runs one trajectory at 100 tokens (1900 left), the destination four at
    1500 (500 left each). The data paces the trainer."""
    cost = DecodeCost(base_s=0.05, expert_s=0.0, per_seq_s=0.005, per_ctx_s=0.0, weight_load_s=1.0,
                      prefill_per_token_s=prefill_per_token_s)
    cfg = build(PolicyConfig, {"batch_size": 1, "group_size": 4, "eta": 1})
    pol = DoraPolicy(cfg)
    pol.handle(E.ClusterStarted(tuple(E.InstanceSpec(i, 8, 10**6) for i in range(3)), 1, cost=cost), 0.0)
    v = pol.view
    v.latest_version = 1
    v.instances[0].versions = {1}
    for i in (1, 2):
        v.instances[i].versions = {0}
    for _ in range(20):
        pol.pred.observe(7, 2000, 0, 1.0)
    g = v.add_group(100, 5, 10, 0.0)
    v.open_group(g, 0)
    for k, (inst, made) in enumerate([(1, 100.0)] + [(2, 1500.0)] * 4):
        t = v.new_traj(g, k, 0, inst, 0.0)
        pol.prog.join(t.id, inst, 10, made, 0.0)
    pol.prog.f[1] = 2.0
    pol.backlog.clear()
    pol.index_all()
    v.trainer_version = 3  # no late group held the trainer at versions 2 and 3: data paces it
    assert pol.data_bound()
    return pol


def test_consolidation_refuses_a_destination_whose_own_trajectories_it_makes_late():
    """Source drain 2·1900·0.055 = 209 s; destination 500·0.07 = 35 s; merged, batch by batch,
    500·0.075 = 37.5 s for all five, then 1400·0.055 = 77 s for the moved one: 114.5 s. Slots
    idle 114.5 - 35 = 79.5 s < 209 s freed, and the merged drain, though past the deadline, is no
    later than the source's own. The destination's four, now five to a step,
    finish after 500·0.075 = 37.5 s instead of 35: the move pays only if the trainer's deadline is
    at least that far."""
    assert _consolidation(38.0) is not None and _consolidation(38.0).id == 2
    assert _consolidation(36.0) is None


def test_consolidation_counts_the_re_prefill_of_what_moves():
    """The moved trajectory's context, 10 + 100 = 110 tokens, is re-prefilled inside the
    destination's decode steps (the case above). At 1.1 s a token that is 121 s: the
    destination's slots stand idle 79.5 + 121 = 200.5 s, less than the 209 s the source's are
    freed (and its residents finish at 37.5 + 121 s, before the deadline). At 1.2 s a token,
    132 s: 211.5 s > 209 s, refused."""
    assert _consolidation(1000.0, prefill_per_token_s=1.1).id == 2
    assert _consolidation(1000.0, prefill_per_token_s=1.2) is None


def test_consolidation_of_a_tool_bound_version_waits_no_longer_than_the_version_does():
    """The case above, the trainer no longer paced by data (a late group held it at version 1),
    so consolidation is off; groups wait for slots. Once at least half of version 0's five
    running trajectories wait for a tool call (3 of the destination's 4), tool waits, not decode
    speed, decide when the version ends: consolidation runs, its deadline the version's
    predicted last finish (mean remainders, tool waits not counted): the source's drain,
    2·1900·0.055 = 209 s. The merged drain, 114.5 s, and the destination's own, 37.5 s, end
    before it: the trajectory moves and the source loads the newest version."""
    pol = _consolidation_policy()
    v = pol.view
    v.trainer_version = 2
    pol.pace.blocked_at = 1
    assert not pol.data_bound()
    pol.backlog.append(v.add_group(1, 9, 10, 0.0))  # more samples than the newest version's 8 slots
    src = v.instances[1]
    moved = next(iter(src.active))
    dst_trajs = sorted(v.instances[2].active)
    for t in dst_trajs[:2]:
        pol.on_tool_call(t, 2, -1)
    assert pol.capacity_needed() and not pol._tool_bound(0)  # 2 of 5
    pol._repartition_version(0, 1)
    assert moved in src.active and src.loading < 0  # not tool-bound, not paced by data: nothing moves
    pol.on_tool_call(dst_trajs[2], 2, -1)
    assert pol._tool_bound(0)  # 3 of 5
    assert abs(pol._last_finish(0) - 209.0) < 1e-9
    assert pol._safe_destination(0, src, pol.now + 114.0, tools=True) is None  # the merged drain is later
    assert pol._safe_destination(0, src, pol.now + 115.0, tools=True) is v.instances[2]
    pol._repartition_version(0, 1)
    assert pol.prog.where(moved) == 2 and src.loading == 1


def test_no_slots_are_needed_for_groups_the_run_never_trains():
    """B = 1, a group waiting for slots: the newest version needs slots, unless every group the
    run will still train has them. At trainer version 3 of a 5-step run (not training) the run
    trains 5 - 3 = 2 more groups; with 2 untrained groups placed and 1 waiting, the waiting one is
    never trained. In a 6-step run it is the third still to train: slots are needed."""
    pol = _consolidation_policy()
    assert pol.run_steps == 0  # ClusterStarted gave no steps: the run is taken to go on
    pol.backlog.append(pol.view.add_group(1, 9, 10, 0.0))
    pol.untrained = 3  # two placed, one backlogged
    assert pol.capacity_needed()
    pol.run_steps = 5
    assert not pol.capacity_needed()
    pol.run_steps = 6
    assert pol.capacity_needed()
    pol.run_steps, pol.dc.run_length = 5, False  # the rule off: the waiting group wants slots
    assert pol.capacity_needed()


def test_the_run_length_reaches_the_scheduler():
    pol = DoraPolicy(build(PolicyConfig, {"batch_size": 1, "group_size": 4, "eta": 1}))
    pol.handle(E.ClusterStarted((E.InstanceSpec(0, 8, 10**6),), 1, steps=7), 0.0)
    assert pol.run_steps == 7
