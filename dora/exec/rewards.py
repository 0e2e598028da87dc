"""Reward functions: a registry of name -> fn(completion_text, answer) -> float.

Built in:
  count  graded score for the synthetic counting task (dora.exec.tasks.count_task)
  math   1.0 if the completion's final answer equals the reference answer, else 0.0
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Callable

from dora.errors import InputError

RewardFn = Callable[[str, str], float]
REWARDS: dict[str, RewardFn] = {}


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: register fn under name (a later registration replaces an earlier one)."""
    def wrap(fn: RewardFn) -> RewardFn:
        REWARDS[name] = fn
        return fn
    return wrap


def get_reward(name: str) -> RewardFn:
    if name not in REWARDS:
        raise InputError(f"reward {name!r}: unknown; choose from {', '.join(sorted(REWARDS))}")
    return REWARDS[name]


# --- synthetic counting task -------------------------------------------------------------

@register("count")
def count_reward(completion: str, answer: str) -> float:
    """Longest correct prefix of whitespace-separated items / max(expected, produced) items.

    1.0 only for the exact list; stopping early, running on, or a wrong item cost in proportion.
    """
    expected = answer.split()
    got = completion.split()
    if not expected:
        return 1.0 if not got else 0.0
    prefix = 0
    for e, g in zip(expected, got):
        if e != g:
            break
        prefix += 1
    return prefix / max(len(expected), len(got))


# --- math answers ------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces balanced; None if absent or unclosed."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    i = starts[-1]
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def extract_final_answer(text: str) -> str | None:
    """The final answer: the last \\boxed{} if any, else after the last '####' or 'answer is',
    else the last number in the text; None if nothing is found."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    for marker in (r"####", r"answer is\s*:?", r"[Aa]nswer\s*:"):
        parts = re.split(marker, text, flags=re.IGNORECASE)
        if len(parts) > 1:
            tail = parts[-1].strip()
            m = _NUMBER.search(tail)
            if m:
                return m.group(0)
            if tail:
                return tail.splitlines()[0].strip().rstrip(".")
    nums = _NUMBER.findall(text)
    return nums[-1] if nums else None


def normalize_answer(ans: str) -> str:
    """Strip LaTeX wrappers, units-free spacing, '$', thousands commas and trailing '.'."""
    s = ans.strip()
    s = re.sub(r"\\text\s*\{([^}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:left|right|displaystyle|!|,|;)", "", s)
    s = s.replace("$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"\\d?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"(\1)/(\2)", s)
    s = re.sub(r"\\[()\[\]]", "", s)  # \( \) \[ \] delimiters
    s = s.replace(" ", "").rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


def _as_number(s: str) -> Fraction | None:
    t = s.replace("(", "").replace(")", "")
    try:
        if "/" in t:
            num, den = t.split("/", 1)
            return Fraction(num) / Fraction(den)
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


@register("math")
def math_reward(completion: str, answer: str) -> float:
    """1.0 if the extracted final answer equals the reference (numerically when both are numbers,
    e.g. 0.5 == 1/2 == \\frac{1}{2}; else as normalised strings), else 0.0."""
    got = extract_final_answer(completion)
    if got is None:
        return 0.0
    ref = last_boxed(answer)
    g, r = normalize_answer(got), normalize_answer(ref if ref is not None else answer)
    if g == r:
        return 1.0
    gn, rn = _as_number(g), _as_number(r)
    if gn is not None and rn is not None:
        return 1.0 if abs(gn - rn) <= Fraction(1, 10**6) * max(1, abs(rn)) else 0.0
    return 0.0
