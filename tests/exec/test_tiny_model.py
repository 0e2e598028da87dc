"""The tiny local checkpoint: loads with transformers, tokenizer round-trips, deterministic."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from dora.errors import InputError  # noqa: E402
from dora.exec.tiny_model import build_tiny_model, main  # noqa: E402
from dora.exec.tokenizer import EOS, WORDS  # noqa: E402


def test_loads_with_transformers(tiny_model_dir, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tiny_tokenizer)
    assert model.config.eos_token_id == tiny_tokenizer.eos_token_id == EOS
    ids = tiny_tokenizer("count 3 to 17 :", return_tensors="pt")["input_ids"]
    logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()
    files = {p.name for p in tiny_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files


@pytest.mark.parametrize("text", [
    "count 3 to 17 : 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17",
    "The answer is \\boxed{12}.",
    "what is the sum of 1 and 2? Answer: 3",
    "unseen wörds, 中文 and\ttabs\nnewlines",
])
def test_tokenizer_round_trips_text(tiny_tokenizer, text):
    ids = tiny_tokenizer(text)["input_ids"]
    assert tiny_tokenizer.decode(ids) == text
    assert max(ids) < len(tiny_tokenizer)


def test_task_words_are_single_tokens_and_digits_split(tiny_tokenizer):
    for w in WORDS:
        assert len(tiny_tokenizer(w)["input_ids"]) == 1, w
        assert len(tiny_tokenizer(" " + w)["input_ids"]) == 1, w
    assert tiny_tokenizer.convert_ids_to_tokens(tiny_tokenizer("417")["input_ids"]) == ["4", "1", "7"]


def test_saved_tokenizer_matches_autotokenizer(tiny_model_dir, tiny_tokenizer):
    # transformers loads qwen2 checkpoints as Qwen2Tokenizer; the raw tokenizer.json must agree with it
    from transformers import TokenizersBackend

    raw = TokenizersBackend.from_pretrained(str(tiny_model_dir))
    for text in ["count 98 to 102 :", " 98 99 100 101 102", "The answer is \\boxed{7}"]:
        assert raw(text)["input_ids"] == tiny_tokenizer(text)["input_ids"]


def test_build_is_deterministic(tmp_path, tiny_model_dir):
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    same = (again / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    assert same
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_text() == (tiny_model_dir / "tokenizer.json").read_text()


def test_warm_start_lowers_the_loss(tmp_path):
    out = build_tiny_model(tmp_path / "ws", warm_start_steps=12, seed=0)
    info = json.loads((out / "dora_tiny_model.json").read_text())
    assert info["warm_start_steps"] == 12
    assert info["warm_start_loss_first"] > info["warm_start_final_loss"]


def test_bad_shapes_are_refused(tmp_path, capsys):
    with pytest.raises(InputError, match="head_dim"):
        build_tiny_model(tmp_path / "x", hidden_size=64, heads=4)  # head_dim 16: vLLM CPU has no kernel
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "y"), "--heads", "3"])
    assert e.value.code == 2
    assert "not divisible" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()


def test_cli_writes_a_checkpoint(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "cli"), "--layers", "1"]) == 0
    assert json.loads((tmp_path / "cli" / "config.json").read_text())["num_hidden_layers"] == 1
    assert "written" in capsys.readouterr().out


def test_eval_score_is_repeatable_and_in_range(tiny_model_dir):
    from dora.exec.tiny_model import eval_score

    a = eval_score(tiny_model_dir, prompts=3, samples=2, max_new_tokens=8)
    b = eval_score(tiny_model_dir, prompts=3, samples=2, max_new_tokens=8)
    assert a == b  # same prompts and sampling seed for every call
    assert 0.0 <= a["exact"] <= a["score"] <= 1.0  # an exact answer scores 1
    assert 0 < a["len_mean"] <= 8


def test_warm_start_with_reversed_answers(tmp_path):
    out = build_tiny_model(tmp_path / "rev", warm_start_steps=4, seed=0, warm_start_reverse_frac=0.5)
    info = json.loads((out / "dora_tiny_model.json").read_text())
    assert info["warm_start_reverse_frac"] == 0.5
    plain = build_tiny_model(tmp_path / "plain", warm_start_steps=4, seed=0)
    assert (out / "model.safetensors").read_bytes() != (plain / "model.safetensors").read_bytes()
    with pytest.raises(InputError, match="reverse fraction"):
        build_tiny_model(tmp_path / "bad", warm_start_steps=2, warm_start_reverse_frac=1.0)
