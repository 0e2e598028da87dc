"""DORA: multi-version streaming rollout for asynchronous RL post-training.

Packages: `dora.sched` (scheduler core and policies), `dora.sim` (SimPy cluster),
`dora.exec` (real executor). Shared modules: `trace`, `eventlog`, `metrics`, `config`.
"""

__version__ = "0.1.0"
