"""Trace statistics: percentiles, tail token share, truncation share, drift."""

from __future__ import annotations

import numpy as np

from dora.trace.schema import Trace


def trace_stats(tr: Trace) -> dict:
    r = tr.response_len.astype(np.float64)
    p50, p90, p99 = np.percentile(r, [50, 90, 99])
    srt = np.sort(r)[::-1]
    top = max(1, int(round(0.1 * len(srt))))
    out = {
        "trajectories": int(len(r)),
        "groups": int(tr.num_groups),
        "group_size": int(tr.group_size),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(r.max()),
        "mean": float(r.mean()),
        "p99_over_p50": float(p99 / p50),
        "top10_token_share": float(srt[:top].sum() / srt.sum()),
        # unknown (None) without a finish_reason column or a recorded cap
        "truncated_share": float(tr.truncated().mean())
        if tr.finish_reason is not None or tr.recorded_cap else None,
        "prompt_p50": float(np.median(tr.prompt_len)),
        "prompt_mean": float(tr.prompt_len.mean()),
        "intra_group_corr": _intra_group_corr(tr),
    }
    if tr.step is not None and tr.step.max() > tr.step.min():
        lo, hi = np.percentile(tr.step, [10, 90])
        out["steps"] = int(tr.step.max() - tr.step.min() + 1)
        out["median_first_decile"] = float(np.median(r[tr.step <= lo]))
        out["median_last_decile"] = float(np.median(r[tr.step >= hi]))
    if tr.turns is not None:
        turns = tr.turns.astype(np.float64)
        calls = turns - 1
        multi = calls > 0
        wait = tr.tool_wait_s if tr.tool_wait_s is not None else np.zeros(len(r))
        tool = tr.tool_tokens if tr.tool_tokens is not None else np.zeros(len(r), dtype=np.int32)
        out["turns_mean"] = float(turns.mean())
        out["turns_p90"] = float(np.percentile(turns, 90))
        out["turns_max"] = int(turns.max())
        out["multi_turn_share"] = float(multi.mean())
        # per tool call (a trajectory's calls all take its tool_wait_s / tool_tokens)
        out["tool_wait_s_p50"] = float(np.median(np.repeat(wait[multi], calls[multi].astype(np.int64)))) \
            if multi.any() else 0.0
        out["tool_wait_s_per_traj_mean"] = float((calls * wait).mean())
        out["tool_tokens_per_call_mean"] = float((calls * tool).sum() / calls.sum()) if multi.any() else 0.0
        out["tool_tokens_per_traj_mean"] = float(tr.tool_tokens_total().mean())
    return out


def _intra_group_corr(tr: Trace) -> float:
    """Share of log-length variance between groups (ANOVA intraclass correlation)."""
    g = tr.group_size
    if g < 2 or tr.num_groups < 2:
        return float("nan")
    x = np.log(tr.response_len.astype(np.float64)).reshape(-1, g)
    within = x.var(axis=1, ddof=1).mean()
    between = x.mean(axis=1).var(ddof=1) - within / g
    total = between + within
    return float(max(between, 0.0) / total) if total > 0 else float("nan")


def format_stats(path: str, s: dict) -> str:
    lines = [f"trace {path}: {s['trajectories']:,} trajectories, {s['groups']:,} groups x {s['group_size']}"]
    if "steps" in s:
        lines[0] += f", {s['steps']} steps"
    lines.append("  response_len  p50 {p50:,.0f}  p90 {p90:,.0f}  p99 {p99:,.0f}  max {max:,.0f}  "
                 "mean {mean:,.0f}  p99/p50 {p99_over_p50:.1f}".format(**s))
    trunc = "unknown (no finish_reason column, no recorded cap)" if s["truncated_share"] is None else \
        "{:.2%}".format(s["truncated_share"])
    lines.append("  longest 10% of trajectories hold {:.1%} of tokens; truncated (finish=length) {}"
                 .format(s["top10_token_share"], trunc))
    lines.append("  prompt_len p50 {prompt_p50:,.0f} mean {prompt_mean:,.0f}; intra-group corr of log length "
                 "{intra_group_corr:.2f}".format(**s))
    if "steps" in s:
        lines.append("  drift: median {median_first_decile:,.0f} (first 10% of steps) -> "
                     "{median_last_decile:,.0f} (last 10%)".format(**s))
    if "turns_mean" in s:
        lines.append("  turns mean {turns_mean:.2f} (p90 {turns_p90:.0f}, max {turns_max}; {multi_turn_share:.1%} "
                     "multi-turn); tool call wait p50 {tool_wait_s_p50:.1f} s, {tool_wait_s_per_traj_mean:.1f} s "
                     "per trajectory; tool output {tool_tokens_per_call_mean:,.0f} tokens per call, "
                     "{tool_tokens_per_traj_mean:,.0f} per trajectory".format(**s))
    return "\n".join(lines)
