"""What `--model` names: a local checkpoint directory, a hub id (`org/name`), or a short name a
user types (`Qwen2.5-7B`), resolved before any engine starts.

- A directory must be a Hugging Face checkpoint (config.json with a model_type, weights,
  tokenizer files): `check_checkpoint`.
- A short name of a known family gets its organisation (`Qwen2.5-7B` -> `Qwen/Qwen2.5-7B`),
  said in one line.
- A hub id must be in the local Hugging Face cache or the hub must answer within a few seconds
  (`HF_HUB_OFFLINE=1`: the cache alone); otherwise one line names the cause and the fix, rather
  than minutes of retries followed by a tokenizer error.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dora.errors import InputError

WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
FIX = "pass a local checkpoint directory (build a tiny one: python -m dora.exec.tiny_model --out DIR) or a hub id"
# short-name prefix (lower case) -> hub organisation
ORGS = {"qwen": "Qwen", "qwq": "Qwen", "llama-": "meta-llama", "meta-llama": "meta-llama", "deepseek": "deepseek-ai",
        "mistral": "mistralai", "mixtral": "mistralai", "gemma": "google", "phi-": "microsoft", "olmo": "allenai"}
PROBE_TIMEOUT_S = 5.0


def resolve_model(model: str) -> str:
    """The model reference the engines and the trainer load: the directory itself, or a hub id."""
    p = Path(model).expanduser()
    if p.exists():
        check_checkpoint(model, p)
        return model
    if model.startswith(("/", ".", "~")) or model.endswith("/") or model.count("/") > 1:
        raise InputError(f"model {model}: not found; {FIX}")
    repo = model
    if "/" not in model:
        org = next((o for k, o in ORGS.items() if model.lower().startswith(k)), None)
        if org is None:
            raise InputError(f"model {model}: not a directory here and not a hub id (org/name); {FIX}")
        repo = f"{org}/{model}"
    named = repo if repo == model else f"{model} (taken as the hub id {repo})"
    check_hub(repo, named)
    if repo != model:
        print(f"model {named}", file=sys.stderr)
    return repo


def check_hub(repo: str, named: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """The hub id is cached locally, or the hub answers for it within `timeout` seconds (`named`:
    how errors name it)."""
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(repo, "config.json"), str):
        return  # in the local cache: the engines load it from there
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise InputError(f"model {named}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set; download it "
                         f"on a machine with network (huggingface-cli download {repo}), or {FIX}")
    try:
        HfApi().model_info(repo, timeout=timeout)
    except GatedRepoError:
        return  # it exists; the engines need a token (HF_TOKEN) to fetch it
    except RepositoryNotFoundError:
        raise InputError(f"model {named}: no such model on the Hugging Face hub (or it is private); check the id, "
                         f"or {FIX}") from None
    except Exception as e:  # noqa: BLE001 (network errors come from several libraries)
        raise InputError(f"model {named}: the Hugging Face hub cannot be reached ({type(e).__name__}) and the model "
                         f"is not in the local cache; {FIX}") from None


def check_checkpoint(model: str, p: Path) -> None:
    """Refuse a local path that cannot load: a Hugging Face checkpoint directory with config.json
    (with a model_type), weights and tokenizer files."""
    if not p.is_dir():
        raise InputError(f"model {model}: is a file, not a checkpoint directory; {FIX}")
    cfg = p / "config.json"
    if not cfg.is_file():
        raise InputError(f"model {model}: no config.json, not a Hugging Face checkpoint; {FIX}")
    try:
        meta = json.loads(cfg.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"model {model}: config.json is not valid JSON ({type(e).__name__}); {FIX}") from None
    if not isinstance(meta, dict) or "model_type" not in meta:
        raise InputError(f"model {model}: config.json has no model_type; {FIX}")
    if not any(next(p.glob(pat), None) for pat in WEIGHT_FILES):
        raise InputError(f"model {model}: no weights ({' or '.join(WEIGHT_FILES)}); {FIX}")
    for w in sorted(p.glob("*.safetensors")):
        if not _safetensors_header_ok(w):
            raise InputError(f"model {model}: {w.name} is not a readable safetensors file (truncated or "
                             f"corrupt header); re-save the checkpoint")
    if not any((p / f).is_file() for f in TOKENIZER_FILES):
        raise InputError(f"model {model}: no tokenizer files ({', '.join(TOKENIZER_FILES)}); {FIX}")


def _safetensors_header_ok(path: Path) -> bool:
    """A safetensors file starts with an 8-byte little-endian length and that many bytes of JSON."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                return False
            n = int.from_bytes(head, "little")
            if n < 2 or n > 100_000_000:
                return False
            blob = f.read(n)
        return len(blob) == n and isinstance(json.loads(blob), dict)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
