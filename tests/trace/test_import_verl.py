"""verl's rollout dump (trainer.rollout_data_dir) imported by its own field names, tokens counted
with the tiny model's local tokenizer."""

from __future__ import annotations

import json

import pytest

from dora.trace import load_trace
from dora.trace.__main__ import main

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")  # the tiny tokenizer is built through transformers


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from dora.exec.tokenizer import build_tokenizer

    tok = build_tokenizer()
    d = tmp_path_factory.mktemp("tok")
    tok.save_pretrained(d)
    return d, tok


def dump_generations(path, step: int, inputs, outputs, scores, extra: dict) -> None:
    """What verl's RayPPOTrainer._dump_generations (verl/trainer/ppo/ray_trainer.py) writes: one
    <step>.jsonl, one object per sample with input, output, gts, score, step and the reward extras."""
    n = len(inputs)
    base = {"input": inputs, "output": outputs, "gts": ["42"] * n, "score": scores, "step": [step] * n}
    base.update({k: v for k, v in extra.items() if len(v) == n})
    lines = [json.dumps({k: v[i] for k, v in base.items()}, ensure_ascii=False) for i in range(n)]
    (path / f"{step}.jsonl").write_text("\n".join(lines) + "\n")


def test_verl_rollout_dir(tmp_path, tiny_tokenizer, capsys):
    tok_dir, tok = tiny_tokenizer
    prompts = ["Question: count from 1 to 5", "Question: what is the sum of 3 and 4?", "Count down from 9"]
    answers = {p: [f"{p} " + " ".join(str(k) for k in range(j * 3 + i)) for j in range(4)] for i, p in enumerate(prompts)}
    answers[prompts[0]][1] = ""  # an empty response: the end token only
    dumps = tmp_path / "rollout_data"
    dumps.mkdir()
    for step in (1, 2, 10):  # file order 1, 2, 10 (numeric), samples of a prompt not contiguous (balance_batch)
        order = [(p, j) for j in range(4) for p in prompts]
        dump_generations(dumps, step, [p for p, _ in order], [answers[p][j] for p, j in order],
                         [float(j % 2) for _, j in order], {"acc": [j % 2 == 1 for _, j in order]})
    out = tmp_path / "verl.parquet"
    assert main(["import", str(dumps), "--format", "verl", "--tokenizer", str(tok_dir), "-o", str(out)]) == 0
    assert capsys.readouterr().err == ""
    tr = load_trace(out)
    assert tr.group_size == 4 and tr.num_groups == 9 and sorted(set(tr.step.tolist())) == [1, 2, 10]
    count = lambda text: len(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    want = [max(1, count(a)) for _ in (1, 2, 10) for p in prompts for a in answers[p]]
    assert tr.response_len.tolist() == want
    assert tr.prompt_len.tolist() == [count(p) for _ in (1, 2, 10) for p in prompts for _ in range(4)]
    meta = tr.metadata
    assert meta["source"]["format"] == "verl" and meta["source"]["files"] == 3
    assert meta["mapping"]["response_len"] == "output" and meta["tokenizer"]["file"] == "tokenizer.json"
    assert len(meta["prompt_ids"]["values"]) == 9 and meta["prompt_ids"]["values"][0].startswith("sha256:")


def test_verl_single_file_and_tokenizer_file(tmp_path, tiny_tokenizer, capsys):
    tok_dir, _ = tiny_tokenizer
    dump_generations(tmp_path, 3, ["a b", "a b"], ["1 2 3", "4"], [1.0, 0.0], {})
    out = tmp_path / "one.parquet"
    assert main(["import", str(tmp_path / "3.jsonl"), "--format", "verl", "--tokenizer",
                 str(tok_dir / "tokenizer.json"), "-o", str(out)]) == 0
    tr = load_trace(out)
    assert tr.group_size == 2 and tr.step.tolist() == [3, 3]
    assert tr.response_len[0] > tr.response_len[1] >= 1


def test_missing_tokenizers_package_is_one_line(tmp_path, tiny_tokenizer, capsys, monkeypatch):
    tok_dir, _ = tiny_tokenizer
    dump_generations(tmp_path, 1, ["q"], ["a"], [0.0], {})
    monkeypatch.setitem(__import__("sys").modules, "tokenizers", None)  # `import tokenizers` fails
    with pytest.raises(SystemExit) as e:
        main(["import", str(tmp_path / "1.jsonl"), "--format", "verl", "--tokenizer", str(tok_dir),
              "-o", str(tmp_path / "o.parquet")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "pip install tokenizers" in err
    assert not (tmp_path / "o.parquet").exists()
