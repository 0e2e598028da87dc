"""VersionCohorts: the point a tenth of a version's longer trajectories have passed while still running, hand-computed."""

from hypothesis import given
from hypothesis import strategies as st

from dora.sched.cohort import VersionCohorts


def _cohort(finished, made, **kw):
    c = VersionCohorts(**kw)
    for n in finished:
        c.finish(0, n)
    c.refresh(0, 0.0, list(range(len(made))), made.__getitem__)
    return c


def test_floor_is_the_kth_furthest_running_trajectory():
    c = _cohort([100, 200, 300, 400, 500], [150.0, 600.0, 700.0, 800.0, 50.0])
    # longer than 250: 300, 400, 500 finished, 600, 700, 800 running: 6; a tenth of 6 is 0.6, so
    # more than that is 1 trajectory: the furthest running one, at 800
    assert c.floor(0, 250.0) == 800.0
    # longer than 0: all 10; more than a tenth is 2: the second furthest, at 700
    assert c.floor(0, 0.0) == 700.0
    # longer than 650: none finished, 700 and 800 running: 1 of 2 suffices, at 800
    assert c.floor(0, 650.0) == 800.0


def test_no_floor_without_enough_running():
    # 100 finished longer than 10 and 5 running: more than a tenth of 105 is 11 > 5 running
    c = _cohort(list(range(11, 111)), [500.0] * 5)
    assert c.floor(0, 10.0) == 0.0
    assert VersionCohorts().floor(3, 0.0) == 0.0  # a version never refreshed
    assert _cohort([100], []).floor(0, 0.0) == 0.0  # nothing running


def test_running_trajectories_are_sampled_and_counted_back():
    made = [float(100 * i) for i in range(10)]  # 0, 100, ..., 900
    c = _cohort([], made, sample=4)  # 10 running, one in 3 sampled: 0, 300, 600, 900
    assert c.stride[0] == 3 and c.made[0] == [0.0, 300.0, 600.0, 900.0]
    # longer than 200: 600, 900 sampled (x3 = 6, and 300 made >= 200: 3 x 3 = 9); a tenth of 9 over
    # stride 3 is 0.3, so the furthest sample, at 900
    assert c.floor(0, 200.0) == 900.0
    # share 0.5: 0.5 x 9 / 3 = 1.5, so the second furthest sample, at 600
    assert _cohort([], made, sample=4, share=0.5).floor(0, 200.0) == 600.0


def test_lengths_finished_after_a_refresh_wait_for_the_next():
    c = _cohort([100, 200], [300.0] * 10)
    assert c.floor(0, 0.0) == 300.0  # 12 longer than 0: more than a tenth is 2 of the 10 running
    for _ in range(100):
        c.finish(0, 250)
    assert c.floor(0, 0.0) == 300.0  # still as of the refresh
    c.refresh(0, 5.0, list(range(10)), ([300.0] * 10).__getitem__)
    assert c.floor(0, 0.0) == 0.0  # 112 longer: more than a tenth is 12, and only 10 run


def test_no_floor_below_g():
    # 50 finished longer than 400, one running past it and nine short of it: more than a tenth
    # of 51 is 6, and the sixth furthest running trajectory has not reached 400
    c = _cohort([1000] * 50, [5.0] * 9 + [500.0])
    assert c.floor(0, 400.0) == 0.0


def test_refresh_interval_and_forgetting():
    c = VersionCohorts(refresh_s=1.0)
    assert c.stale(0, 0.0)
    c.refresh(0, 10.0, [], lambda t: 0.0)
    assert not c.stale(0, 11.0) and c.stale(0, 11.5)
    c.finish(0, 5)
    c.finish(1, 7)
    c.drop_before(1)
    assert 0 not in c.fin and 0 not in c.at and c.fin[1] == [7]


@given(st.lists(st.integers(1, 10_000), max_size=60), st.lists(st.floats(0, 10_000), max_size=60),
       st.floats(0, 10_000), st.integers(1, 16))
def test_floor_is_a_running_trajectory_past_g_or_zero(finished, made, g, sample):
    c = _cohort(finished, made, sample=sample)
    x = c.floor(0, g)
    assert x == 0.0 or (x in made and x >= g)


def _dora(check: bool):
    """Version 0 on instances 0 and 1 (the newest is 1, on instance 2). History: 20 finished
    lengths 110, 120, ..., 300. Running: trajectory 0 has made 100 tokens (instance 0), the others
    400, 450 (instance 1), 500 and 600 (instance 0): the history has seen none as long."""
    from dora.config import build
    from dora.sched import events as E
    from dora.sched.config import PolicyConfig
    from dora.sched.costs import DecodeCost
    from dora.sched.policies.dora import DoraPolicy

    cost = DecodeCost(base_s=0.005, expert_s=0.0, per_seq_s=0.005, per_ctx_s=0.0, kv_base_s=0.0, kv_per_token_s=0.0,
                      weight_load_s=1.0)

    pol = DoraPolicy(build(PolicyConfig, {"batch_size": 1, "group_size": 4, "eta": 1,
                                          "dora": {"cohort_check": check}}))
    pol.handle(E.ClusterStarted(tuple(E.InstanceSpec(i, 8, 10**6) for i in range(3)), 1, cost=cost), 0.0)
    v = pol.view
    v.latest_version = 1
    for i, ver in ((0, 0), (1, 0), (2, 1)):
        v.instances[i].versions = {ver}
    for pid, inst, made in ((0, 0, (100.0, 500.0, 600.0)), (1, 1, (400.0, 450.0))):
        g = v.add_group(pid, len(made), 0, 0.0)
        v.open_group(g, 0)
        for k, m in enumerate(made):
            t = v.new_traj(g, k, 0, inst, 0.0)
            pol.prog.join(t.id, inst, 0, m, 0.0)
    for n in range(110, 301, 10):
        pol.pred.observe(100 + n, n, 0, 1.0)
        if pol.cohorts is not None:
            pol.cohorts.finish(0, n)
    pol.index_all()
    return pol


def test_a_bound_the_version_refutes_falls_back():
    # the history's bound for trajectory 0: lengths above 100 are all 20, the 90th percentile is
    # the 19th (290): 190 tokens left
    assert _dora(False).remaining(0, cautious=True, bound=True, widen=False) == 190.0
    # its version: 20 finished and 5 running (itself included) longer than 100; more than a tenth
    # of 25 is 3, and the third furthest running trajectory has made 450 > 290: refuted, so the
    # larger of 450 - 100 and 3 x 100 + 1
    assert _dora(True).remaining(0, cautious=True, bound=True, widen=False) == 350.0
    # the mean and the plain cautious remainder are the history's either way
    assert _dora(True).remaining(0, cautious=True) == _dora(False).remaining(0, cautious=True) == 190.0
