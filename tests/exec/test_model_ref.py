"""`--model`: local checkpoints, short names, hub ids without a network; each failure one line, fast."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dora.errors import InputError
from dora.exec.model_ref import ORGS, resolve_model
from tests.conftest import REPO

pytest.importorskip("huggingface_hub")


@pytest.fixture
def no_hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache and a hub endpoint that refuses connections (a closed local port)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(c, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)


def test_a_short_name_is_its_family_hub_id(no_hub):
    with pytest.raises(InputError, match=r"model Qwen2\.5-7B \(taken as the hub id Qwen/Qwen2\.5-7B\): the Hugging "
                                         r"Face hub cannot be reached"):
        resolve_model("Qwen2.5-7B")
    assert ORGS["deepseek"] == "deepseek-ai"


def test_unknown_short_name_and_missing_path(no_hub, tmp_path):
    with pytest.raises(InputError, match="not a directory here and not a hub id"):
        resolve_model("my-model-7b")
    with pytest.raises(InputError, match="not found"):
        resolve_model(str(tmp_path / "nowhere"))


def test_a_local_checkpoint_is_itself(tiny_model_dir):
    assert resolve_model(str(tiny_model_dir)) == str(tiny_model_dir)


def test_incomplete_checkpoint_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}')
    with pytest.raises(InputError, match="no weights"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize("offline", [True, False])
def test_no_network_fails_in_seconds_with_one_line(tmp_path, offline):
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    env.pop("HF_HUB_OFFLINE", None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    r = subprocess.run([sys.executable, "-m", "dora.exec", "--model", "Qwen2.5-7B", "--steps", "2", "--local"],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    cause = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub cannot be reached"
    assert cause in r.stderr and "Qwen/Qwen2.5-7B" in r.stderr and "python -m dora.exec.tiny_model" in r.stderr
