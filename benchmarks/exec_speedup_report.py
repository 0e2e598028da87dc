"""benchmarks/exec_speedup.py's statistics, table and figure: the final reward of a run, means and
standard errors over seeds, the per-policy summary, its printed table and the reward/score plot."""

from __future__ import annotations

import math


def final_reward(rewards: list[float], frac: float = 0.1) -> tuple[float, float]:
    """Mean of the last max(1, round(frac * n)) per-step rewards and its standard error (0 for one step)."""
    if not rewards:
        return float("nan"), float("nan")
    return mean_se(rewards[-max(1, round(frac * len(rewards))):])


def mean_se(xs: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for one value)."""
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n)


def run_labels(runs: list[dict]) -> list[str]:
    """Table/plot label of each run: its policy, or policy+correction when the runs differ in correction."""
    several = len({r.get("correction", "tis") for r in runs}) > 1
    return [f"{r['policy']}+{r.get('correction', 'tis')}" if several else r["policy"] for r in runs]


def summarize(runs: list[dict]) -> dict:
    """Per policy: mean +- standard error over seeds of final reward, wall, e2e samples/s, bubble; max staleness;
    speedup = e2e samples/s over sync's (when sync ran)."""
    out: dict[str, dict] = {}
    labels = run_labels(runs)
    for pol in dict.fromkeys(labels):
        rs = [r for r, lab in zip(runs, labels) if lab == pol]
        row = {"seeds": len(rs)}
        for key in ("final_reward", "wall_s", "e2e_samples_per_s", "bubble_ratio", "staleness_mean"):
            row[key], row[key + "_se"] = mean_se([r[key] for r in rs])
        if all(math.isfinite(r.get("final_eval", float("nan"))) for r in rs):
            row["final_eval"], row["final_eval_se"] = mean_se([r["final_eval"] for r in rs])
            row["first_eval"] = mean_se([r["first_eval"] for r in rs])[0]
        row["staleness_max"] = max(r["staleness_max"] for r in rs)
        for key in ("is_ess_mean", "clip_frac_mean", "is_truncated_frac_mean", "kl_prox_behav_mean"):
            if all(key in r for r in rs):
                row[key] = mean_se([r[key] for r in rs])[0]
        if all("staleness_hist" in r for r in rs):
            hist: dict[str, int] = {}
            for r in rs:
                for k, v in r["staleness_hist"].items():
                    hist[k] = hist.get(k, 0) + v
            row["staleness_hist"] = dict(sorted(hist.items(), key=lambda kv: int(kv[0])))
        out[pol] = row
    if "sync" in out:
        for row in out.values():
            row["speedup_vs_sync"] = row["e2e_samples_per_s"] / out["sync"]["e2e_samples_per_s"]
    return out


def print_table(summary: dict, title: str) -> None:
    print(title)
    print(f"{'policy':12} {'seeds':>5} {'wall s':>14} {'e2e samples/s':>16} {'speedup':>8} {'bubble':>7} "
          f"{'stale mean/max':>15} {'final reward':>16} {'score start->end':>20}")
    for pol, r in summary.items():
        print(f"{pol:12} {r['seeds']:>5} {r['wall_s']:>8.1f} ±{r['wall_s_se']:<5.1f}"
              f"{r['e2e_samples_per_s']:>9.2f} ±{r['e2e_samples_per_s_se']:<5.2f}"
              f"{r.get('speedup_vs_sync', float('nan')):>7.2f}x {r['bubble_ratio']:>7.3f} "
              f"{r['staleness_mean']:>9.2f} / {r['staleness_max']:<3.0f}"
              f"{r['final_reward']:>9.3f} ±{r['final_reward_se']:.3f}"
              + (f"   {r['first_eval']:.3f} -> {r['final_eval']:.3f} ±{r['final_eval_se']:.3f}"
                 if "final_eval" in r else ""))
    if any("is_ess_mean" in r for r in summary.values()):
        print(f"{'':12} {'IS ESS':>8} {'clipped':>8} {'truncated':>9}   staleness histogram (trajectories)")
        for pol, r in summary.items():
            if "is_ess_mean" in r:
                print(f"{pol:12} {r['is_ess_mean']:>8.4f} {r['clip_frac_mean']:>8.4f} "
                      f"{r.get('is_truncated_frac_mean', float('nan')):>9.4f}   {r.get('staleness_hist', {})}")


def plot(runs: list[dict], path: str, title: str) -> None:
    """Top: training reward (per-step mean over the batch, 5-step moving average) against trained samples and
    against wall time; bottom (when scored): the fixed-prompt score. Thick: mean over seeds; thin: each seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    colors = {"sync": "tab:gray", "partial": "tab:blue", "dora": "tab:red"}
    styles = {"tis": "-", "off": "--", "mask": ":"}
    palette = iter(("tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:olive"))
    labels = run_labels(runs)
    by_policy = len(set(labels)) == len({r["policy"] for r in runs})
    scored = any(r.get("eval") for r in runs)
    fig, axes = plt.subplots(2 if scored else 1, 2, figsize=(11, 7.5 if scored else 4), squeeze=False)

    def smooth(y: np.ndarray, w: int = 5) -> np.ndarray:
        if len(y) < w:
            return y
        c = np.cumsum(np.insert(y, 0, 0.0))
        head = c[1:w] / np.arange(1, w)
        return np.concatenate([head, (c[w:] - c[:-w]) / w])

    for pol in dict.fromkeys(labels):
        rs = [r for r, lab in zip(runs, labels) if lab == pol]
        col = colors.get(pol) if by_policy else next(palette, None)
        ls = styles.get(rs[0].get("correction", "tis"), "-")
        label = f"{pol} ({len(rs)} seed{'s' if len(rs) > 1 else ''})"
        n = min(len(r["curve"]) for r in rs)
        if n:
            samples = np.array([p["trained_samples"] for p in rs[0]["curve"][:n]])
            ys = np.array([[p["reward"] for p in r["curve"][:n]] for r in rs])
            ts = np.array([[p["t_s"] for p in r["curve"][:n]] for r in rs])
            for y, t in zip(ys, ts):
                axes[0, 0].plot(samples, smooth(y), color=col, ls=ls, lw=0.6, alpha=0.35)
                axes[0, 1].plot(t, smooth(y), color=col, ls=ls, lw=0.6, alpha=0.35)
            axes[0, 0].plot(samples, smooth(ys.mean(0)), color=col, ls=ls, lw=2, label=label)
            axes[0, 1].plot(ts.mean(0), smooth(ys.mean(0)), color=col, ls=ls, lw=2, label=label)
        m = min(len(r.get("eval", [])) for r in rs)
        if scored and m:
            samples = np.array([p["trained_samples"] for p in rs[0]["eval"][:m]])
            ys = np.array([[p["score"] for p in r["eval"][:m]] for r in rs])
            ts = np.array([[p["t_s"] for p in r["eval"][:m]] for r in rs])
            for y, t in zip(ys, ts):
                axes[1, 0].plot(samples, y, color=col, ls=ls, lw=0.6, alpha=0.35)
                axes[1, 1].plot(t, y, color=col, ls=ls, lw=0.6, alpha=0.35)
            se = ys.std(0, ddof=1) / np.sqrt(len(ys)) if len(ys) > 1 else np.zeros(m)
            axes[1, 0].errorbar(samples, ys.mean(0), yerr=se, color=col, ls=ls, lw=2, marker="o", ms=3, capsize=2,
                                label=label + (" ± s.e." if len(ys) > 1 else ""))
            axes[1, 1].plot(ts.mean(0), ys.mean(0), color=col, ls=ls, lw=2, marker="o", ms=3, label=label)
    for row in axes:
        row[0].set_xlabel("trained samples")
        row[1].set_xlabel("wall time (s)")
    axes[0, 0].set_ylabel("training reward\n(per-step batch mean, 5-step moving avg)")
    if scored:
        axes[1, 0].set_ylabel("score on fixed prompts\n(mean count reward, rollout temperature)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    from dora.plots.style import save

    save(fig, path, dpi=110)
    plt.close(fig)
