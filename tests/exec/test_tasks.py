"""Tasks (synthetic count task, parquet/JSONL datasets) and reward functions."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dora.errors import InputError
from dora.exec.rewards import (REWARDS, count_reward, extract_final_answer, get_reward, last_boxed, math_reward,
                               register)
from dora.exec.tasks import CountTaskParams, count_prompt, count_task, load_dataset


def test_count_task_is_deterministic_and_correct():
    a, b = count_task(200, seed=3), count_task(200, seed=3)
    assert a == b
    assert a != count_task(200, seed=4)
    assert [e.prompt_id for e in count_task(3, seed=0, first_id=10)] == [10, 11, 12]
    for e in a:  # default: count down to 0
        words = e.prompt.split()
        start, stop = int(words[1]), int(words[3])
        assert words[0] == "count" and words[2] == "to" and words[4] == ":"
        assert e.answer.split() == [str(n) for n in range(start, -1, -1)]
        assert stop == 0 and 0 <= start <= CountTaskParams().max_number
    up = count_task(50, seed=3, params=CountTaskParams(descending=False, max_low=9))
    for e in up:
        words = e.prompt.split()
        start, stop = int(words[1]), int(words[3])
        assert 0 <= start <= 9 and start <= stop
        assert e.answer.split() == [str(n) for n in range(start, stop + 1)]
    assert count_prompt(7, 9) == ("count 7 to 9 :", "7 8 9")
    assert count_prompt(9, 7) == ("count 9 to 7 :", "9 8 7")
    with pytest.raises(InputError):
        count_task(5, params=CountTaskParams(max_span=0))


def test_count_task_answer_lengths_are_long_tailed(tiny_tokenizer):
    from dora.exec.tasks import length_stats

    st = length_stats(tiny_tokenizer, count_task(4000, seed=0))
    assert 10 <= st["p50"] <= 30
    assert st["p99"] >= 5 * st["p50"]
    assert st["max"] <= 600


def test_count_reward_partial_credit():
    ans = "3 4 5 6"
    assert count_reward(" 3 4 5 6", ans) == 1.0
    assert count_reward("3 4", ans) == 0.5            # stopped early
    assert count_reward("3 4 5 6 7 8 9 10", ans) == 0.5  # ran on
    assert count_reward("3 4 9 6", ans) == 0.5         # wrong third item
    assert count_reward("", ans) == 0.0
    assert count_reward("three", ans) == 0.0


@pytest.mark.parametrize("completion, answer, expected", [
    ("so the answer is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\sqrt{2}}", "\\sqrt{2}", 1.0),                  # nested braces
    ("first \\boxed{3}, no wait: \\boxed{4}", "4", 1.0),       # the last box counts
    ("first \\boxed{3}, no wait: \\boxed{4}", "3", 0.0),
    ("The answer is 1,000.", "1000", 1.0),                     # thousands comma, trailing dot
    ("... so 6 * 7 = 42\n#### 42", "42", 1.0),                 # GSM8K style
    ("x = -7", "-7", 1.0),
    ("12 apples and then 13", "12", 0.0),                      # last number, not first
    ("I don't know", "5", 0.0),
    ("\\boxed{10\\%}", "10", 1.0),
    ("\\boxed{\\text{B}}", "B", 1.0),
    ("$\\boxed{3.0}$", "3", 1.0),
    ("Answer: 2/4", "\\boxed{1/2}", 1.0),                      # reference given boxed, fraction equality
    ("\\boxed{x+1}", "x + 1", 1.0),
    ("\\boxed{x+2}", "x + 1", 0.0),
])
def test_math_verifier(completion, answer, expected):
    assert math_reward(completion, answer) == expected


def test_answer_extraction_helpers():
    assert last_boxed("a \\boxed{b{c}d} e") == "b{c}d"
    assert last_boxed("\\boxed{open") is None
    assert extract_final_answer("nothing here") is None
    assert extract_final_answer("the answer is 17 apples") == "17"


def test_reward_registry():
    assert get_reward("count") is count_reward and get_reward("math") is math_reward
    with pytest.raises(InputError, match="unknown; choose from"):
        get_reward("nope")

    @register("test_len")
    def _len(c: str, a: str) -> float:
        return float(len(c) == len(a))

    try:
        assert get_reward("test_len")("ab", "cd") == 1.0
    finally:
        REWARDS.pop("test_len")


def test_load_dataset_parquet_and_jsonl(tmp_path):
    pq.write_table(pa.table({"prompt": ["1+1?", "2+3?"], "answer": [2, 5]}), tmp_path / "d.parquet")
    ex = load_dataset(tmp_path / "d.parquet")
    assert [(e.prompt_id, e.prompt, e.answer) for e in ex] == [(0, "1+1?", "2"), (1, "2+3?", "5")]
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "a", "answer": "b"}) + "\n\n")
    assert load_dataset(tmp_path / "d.jsonl")[0].answer == "b"


@pytest.mark.parametrize("name, content, message", [
    ("missing.parquet", None, "not found"),
    ("d.csv", "prompt,answer\n", "unknown format"),
    ("d.jsonl", '{"prompt": "a"}\n', "line 1: key 'answer' is missing"),
    ("d.jsonl", '{"prompt": "a", "answer": 1}\nnot json\n', "line 2: not valid JSON"),
    ("d.jsonl", '{"prompt": "", "answer": 1}\n', "column 'prompt' row 0"),
    ("d.jsonl", "", "no rows"),
])
def test_load_dataset_refuses_bad_input(tmp_path, name, content, message):
    p = tmp_path / name
    if content is not None:
        p.write_text(content)
    with pytest.raises(InputError, match=message) as e:
        load_dataset(p)
    assert str(p) in str(e.value)


def test_load_dataset_parquet_missing_column(tmp_path):
    pq.write_table(pa.table({"question": ["a"], "answer": ["b"]}), tmp_path / "q.parquet")
    with pytest.raises(InputError, match="column 'prompt' is missing"):
        load_dataset(tmp_path / "q.parquet")
    pq.write_table(pa.table({"prompt": ["a", "b"], "answer": ["x", None]}), tmp_path / "n.parquet")
    with pytest.raises(InputError, match="column 'answer' row 1"):
        load_dataset(tmp_path / "n.parquet")


def test_tokenized_prompts_match_the_tokenizer(tiny_tokenizer):
    from dora.exec.tasks import sft_pairs, tokenize_prompts

    ex = count_task(20, seed=1)
    ids = tokenize_prompts(tiny_tokenizer, ex)
    assert [tiny_tokenizer.decode(x) for x in ids] == [e.prompt for e in ex]
    for (p, t), e in zip(sft_pairs(tiny_tokenizer, ex), ex):
        assert p == ids[e.prompt_id - ex[0].prompt_id]
        assert t[-1] == tiny_tokenizer.eos_token_id
        assert count_reward(tiny_tokenizer.decode(t, skip_special_tokens=True), e.answer) == 1.0
        # the concatenation tokenizes as the parts (the engine sees prompt ids + generated ids)
        assert tiny_tokenizer(e.prompt + tiny_tokenizer.decode(t[:-1]))["input_ids"] == p + t[:-1]


def test_examples_for_task_config(tmp_path):
    from dora.config import build
    from dora.exec.config import TaskConfig
    from dora.exec.tasks import examples_for_task

    cfg = build(TaskConfig, {"num_prompts": 7, "seed": 2, "max_low": 0, "descending": False})
    ex = examples_for_task(cfg)
    assert len(ex) == 7 and all(e.prompt.startswith("count 0 to ") for e in ex)
    assert cfg.reward_name() == "count"
    (tmp_path / "m.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    file_cfg = build(TaskConfig, {"dataset": str(tmp_path / "m.jsonl")})
    assert [e.answer for e in examples_for_task(file_cfg)] == ["2"]
    assert file_cfg.reward_name() == "math"
    with pytest.raises(InputError, match="max_low"):
        build(TaskConfig, {"max_low": -1})


def test_sft_pairs_can_reverse_the_direction(tiny_tokenizer):
    from dora.exec.tasks import reversed_answer, sft_pairs

    ex = count_task(6, seed=2)
    flags = [True, False] * 3
    for (p, t), e, f in zip(sft_pairs(tiny_tokenizer, ex, reverse=flags), ex, flags):
        text = tiny_tokenizer.decode(t, skip_special_tokens=True)
        assert t[-1] == tiny_tokenizer.eos_token_id
        assert text.split() == (e.answer.split()[::-1] if f else e.answer.split())
        assert count_reward(text, e.answer) == (1.0 if not f or len(e.answer.split()) == 1 else 0.0)
    assert reversed_answer("3 2 1 0") == "0 1 2 3"
    with pytest.raises(ValueError, match="reverse flags"):
        sft_pairs(tiny_tokenizer, ex, reverse=[True])
