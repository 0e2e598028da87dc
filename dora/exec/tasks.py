"""Prompt datasets: (prompt, answer) rows from parquet/JSONL, or the built-in synthetic task.

The synthetic `count` task: "count A to B :" -> " A A-1 ... B" (or upward when A < B) then <eos>.
The answer's length is set by the prompt (|A - B| + 1 numbers) and the span is drawn from a
log-normal, so correct answers are long-tailed by the task's nature (p99 >= 5x median tokens).
By default it counts down to a low end in [0, max_low] (0): a tiny model learns the digit-level
decrement and the stop at the low end quickly, copying A is the hard part; the `count` reward
gives graded credit (correct prefix / length).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dora.errors import InputError, too_small

BUILTIN_TASKS = ("count",)
DATASET_FIX = "pass a .parquet or .jsonl file with columns prompt, answer"


@dataclass(frozen=True)
class Example:
    """One prompt (a GRPO group is G samples of it) and its reference answer."""

    prompt_id: int
    prompt: str
    answer: str


@dataclass(frozen=True)
class CountTaskParams:
    """Span of a counting prompt: round(lognormal(log(median_span), sigma)), clipped to [1, max_span];
    the low end uniform in [0, max_low]; descending: count from the high end down to the low end
    (the stop is then easy for a tiny model when max_low = 0), else upward."""

    median_span: float = 8.0
    sigma: float = 1.0
    max_span: int = 100
    max_low: int = 0
    descending: bool = True
    max_number: int = 999


def count_prompt(start: int, stop: int) -> tuple[str, str]:
    """Prompt text and reference answer for counting from start to stop (inclusive, either direction)."""
    step = 1 if stop >= start else -1
    return f"count {start} to {stop} :", " ".join(str(n) for n in range(start, stop + step, step))


def count_task(n: int, seed: int = 0, params: CountTaskParams = CountTaskParams(),
               first_id: int = 0) -> list[Example]:
    """n counting prompts, deterministic for (seed, params); ids first_id, first_id+1, ..."""
    if n < 0:
        raise too_small("count task: number of prompts", n, 0)
    if (params.max_span < 1 or params.max_low < 0 or params.max_number < params.max_span
            or params.median_span < 1 or params.sigma < 0):
        raise InputError(f"count task: bad parameters {params}; set them so that 1 <= median_span, 1 <= max_span <= "
                         "max_number, 0 <= max_low, sigma >= 0")
    rng = np.random.default_rng(seed)
    spans = np.rint(rng.lognormal(math.log(params.median_span), params.sigma, size=n)).astype(np.int64)
    spans = np.clip(spans, 1, params.max_span)
    out = []
    for i, span in enumerate(spans):
        low = int(rng.integers(0, min(params.max_low, params.max_number - span + 1) + 1))
        high = low + int(span) - 1
        prompt, answer = count_prompt(high, low) if params.descending else count_prompt(low, high)
        out.append(Example(first_id + i, prompt, answer))
    return out


def examples_for_task(cfg) -> list[Example]:
    """The examples of a dora.exec.config.TaskConfig: the built-in count task or a dataset file."""
    if cfg.dataset == "count":
        params = CountTaskParams(median_span=cfg.median_span, sigma=cfg.sigma, max_span=cfg.max_span,
                                 max_low=cfg.max_low, descending=cfg.descending)
        return count_task(cfg.num_prompts, cfg.seed, params)
    return load_dataset(cfg.dataset)


def completion_text(answer: str) -> str:
    """The target completion for a count-task answer (what follows the prompt, before <eos>)."""
    return " " + answer


def load_dataset(path: str | Path) -> list[Example]:
    """Rows (prompt, answer) from a .parquet or .jsonl file; prompt_id is the row index.

    A missing file or column, a non-string prompt, an empty prompt or a missing answer is refused
    with an InputError naming the file, the column and the first bad row.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"dataset {p}: not found; {DATASET_FIX}")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(p)
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise InputError(f"dataset {p}: not a readable parquet file ({e}); {DATASET_FIX}") from None
        for col in ("prompt", "answer"):
            if col not in table.column_names:
                raise InputError(f"dataset {p}: column {col!r} is missing (columns: {', '.join(table.column_names)}); "
                                 "pass a file with columns prompt, answer")
        prompts = table.column("prompt").to_pylist()
        answers = table.column("answer").to_pylist()
    elif p.suffix in (".jsonl", ".json"):
        prompts, answers = [], []
        for lineno, line in enumerate(p.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"dataset {p} line {lineno}: not valid JSON ({e.msg}); write one JSON object per "
                                 'line, e.g. {"prompt": "...", "answer": "..."}') from None
            if not isinstance(row, dict):
                raise InputError(f"dataset {p} line {lineno}: expected an object with keys prompt, answer")
            for col in ("prompt", "answer"):
                if col not in row:
                    raise InputError(f"dataset {p} line {lineno}: key {col!r} is missing; give every line prompt "
                                     "and answer")
            prompts.append(row["prompt"])
            answers.append(row["answer"])
    else:
        raise InputError(f"dataset {p}: unknown format {p.suffix!r}; use .parquet or .jsonl")
    if not prompts:
        raise InputError(f"dataset {p}: no rows; {DATASET_FIX} and at least one row")
    out = []
    for i, (q, a) in enumerate(zip(prompts, answers)):
        if not isinstance(q, str) or not q.strip():
            raise InputError(f"dataset {p}: column 'prompt' row {i}: expected a non-empty string, got {q!r}")
        if a is None or (isinstance(a, float) and math.isnan(a)):
            raise InputError(f"dataset {p}: column 'answer' row {i}: missing answer; fill or drop the row")
        out.append(Example(i, q, a if isinstance(a, str) else str(a)))
    return out


def tokenize_prompts(tokenizer, examples: list[Example]) -> list[list[int]]:
    """Prompt token ids (as the engine receives them) for each example."""
    ids = tokenizer([e.prompt for e in examples], add_special_tokens=True)["input_ids"]
    for e, x in zip(examples, ids):
        if not x:
            raise InputError(f"prompt {e.prompt_id}: tokenizes to no tokens; drop it or give it text")
    return [list(x) for x in ids]


def reversed_answer(answer: str) -> str:
    """The same numbers in the other order: the wrong direction for the prompt (count reward 0 unless
    the list has one item)."""
    return " ".join(reversed(answer.split()))


def sft_pairs(tokenizer, examples: list[Example],
              reverse: list[bool] | None = None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target response ids ending in <eos>) for supervised warm-start on count prompts;
    where reverse[i] is true, example i's target lists its numbers in the other order."""
    if reverse is not None and len(reverse) != len(examples):
        raise ValueError(f"sft_pairs: {len(reverse)} reverse flags for {len(examples)} examples")
    answers = [reversed_answer(e.answer) if reverse and reverse[i] else e.answer for i, e in enumerate(examples)]
    prompts = tokenize_prompts(tokenizer, examples)
    targets = tokenizer([completion_text(a) for a in answers], add_special_tokens=False)["input_ids"]
    return [(p, list(t) + [tokenizer.eos_token_id]) for p, t in zip(prompts, targets)]


def length_stats(tokenizer, examples: list[Example]) -> dict[str, float]:
    """p50/p90/p99/max of the correct answers' token counts (including <eos>)."""
    lens = np.array([len(t) for _, t in sft_pairs(tokenizer, examples)])
    return {"p50": float(np.percentile(lens, 50)), "p90": float(np.percentile(lens, 90)),
            "p99": float(np.percentile(lens, 99)), "max": float(lens.max()), "mean": float(lens.mean())}
