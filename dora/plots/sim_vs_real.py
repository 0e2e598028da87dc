"""Simulator against the real executor: real and predicted mean step time and end-to-end throughput
per policy, from `benchmarks/sim2real.py`'s sim2real.json (policy -> {real, sim, rel_err})."""

from __future__ import annotations

import numpy as np

from dora.plots.style import policy_color, policy_order, subplots

PANELS = (("step_time_mean_s", "mean step time (s)"),
          ("e2e_samples_per_s", "end-to-end throughput (trained samples / s)"))


def sim_vs_real(res: dict, title: str = "Simulator vs real executor: prediction of a fresh run", band: float = 0.1):
    """Grouped bars (real, simulated) per policy for step time and throughput; each pair is labelled
    with the relative error (sim - real) / real and the real bar carries a +-`band` whisker."""
    policies = [p for p in policy_order() if p in res] + [p for p in res if p not in policy_order()]
    fig, axes = subplots(1, 2, figsize=(12, 4.2))
    x = np.arange(len(policies))
    cols = [policy_color(p) for p in policies]
    for ax, (m, unit) in zip(axes, PANELS):
        real = np.array([res[p]["real"][m] for p in policies], float)
        sim = np.array([res[p]["sim"][m] for p in policies], float)
        ax.bar(x - 0.2, real, 0.4, color=cols, edgecolor="black", label="real (fresh run)")
        ax.bar(x + 0.2, sim, 0.4, color=cols, edgecolor="black", hatch="//", alpha=0.6, label="simulated")
        ax.errorbar(x - 0.2, real, yerr=band * real, fmt="none", ecolor="grey", capsize=4, lw=1)
        top = max(real.max(), sim.max())
        for i in range(len(policies)):
            ax.text(x[i], max(real[i], sim[i]) + 0.13 * top, f"{100 * (sim[i] / real[i] - 1):+.1f}%",
                    ha="center", fontsize=9)
        ax.set_xticks(x, policies)
        ax.set_ylabel(unit)
        ax.set_ylim(0, top * 1.3)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8, title=f"grey whisker: real ±{band:.0%}", title_fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
