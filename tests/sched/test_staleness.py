"""Policy.staleness_excess: which groups a trainer step would push beyond η (hand-made cases)."""

from __future__ import annotations

from dora.sched.config import PolicyConfig
from dora.sched.policy import Policy
from dora.sched.state import G_COMPLETE, GroupView


def _policy(eta: int, B: int, trainer_version: int) -> Policy:
    p = Policy(PolicyConfig(eta=eta, batch_size=B, group_size=1))
    p.view.trainer_version = trainer_version
    return p


def _group(pid: int, version: int, complete: bool, p: Policy) -> GroupView:
    g = GroupView(pid, 1, 1)
    p.view.open_group(g, version)
    if complete:
        g.state = G_COMPLETE
        p.view.buffer[pid] = g
        p.view.buffer_by_version.setdefault(version, {})[pid] = g
    return g


def test_nothing_late():
    p = _policy(eta=2, B=2, trainer_version=3)
    batch = [_group(0, 1, True, p), _group(1, 2, True, p)]
    running = [_group(2, 2, False, p), _group(3, 3, False, p)]
    assert p.staleness_excess(batch, running) == ([], [])


def test_running_group_at_the_bound_must_be_in_this_step():
    # trainer at 3, eta 2: version 1 has staleness 2 now and 3 next step
    p = _policy(eta=2, B=2, trainer_version=3)
    batch = [_group(0, 2, True, p), _group(1, 2, True, p)]
    late = _group(2, 1, False, p)
    assert p.staleness_excess(batch, [late, _group(3, 3, False, p)]) == ([late], [])


def test_too_many_for_the_next_steps():
    # trainer at 0, eta 1, B 1: after this step only one more batch may hold version-0 groups
    p = _policy(eta=1, B=1, trainer_version=0)
    batch = [_group(0, 0, True, p)]
    done = _group(1, 0, True, p)
    running = [_group(2, 0, False, p), _group(3, 0, False, p)]
    late, dropped = p.staleness_excess(batch, running)
    assert dropped == [] and late == running  # the complete one keeps the slot


def test_complete_groups_beyond_capacity():
    p = _policy(eta=0, B=1, trainer_version=5)
    batch = [_group(0, 5, True, p)]
    extra = _group(1, 5, True, p)
    assert p.staleness_excess(batch, []) == ([], [extra])


def test_staleness_ok_agrees_with_staleness_excess():
    """The counting test used on the hot path gives the same verdict as the full rule."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=400, deadline=None)
    @given(eta=st.integers(0, 4), B=st.integers(1, 4), i=st.integers(0, 6),
           groups=st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=0, max_size=24),
           n_batch=st.integers(0, 4))
    def check(eta, B, i, groups, n_batch):
        p = _policy(eta=eta, B=B, trainer_version=i)
        made = [_group(pid, v, done, p) for pid, (v, done) in enumerate(groups)]
        batch = [g for g in made if g.state == G_COMPLETE][:n_batch]
        running = [g for g in made if g.state != G_COMPLETE]
        late, done = p.staleness_excess(batch, running)
        assert p.staleness_ok(batch) == (not late and not done)

    check()
