"""Token counts of text with a local tokenizer (the optional `tokenizers` package; no hub access)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from dora.errors import InputError


class TokenCounter:
    """A tokenizer.json loaded with `tokenizers`; counts tokens without adding special tokens."""

    def __init__(self, path: str | Path):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise InputError("--tokenizer: the 'tokenizers' package is not installed; install it: pip install "
                             "tokenizers (it counts the tokens of imported text)") from None
        p = Path(path)
        f = p / "tokenizer.json" if p.is_dir() else p
        if not f.is_file():
            raise InputError(f"--tokenizer {p}: no tokenizer.json there; pass a local tokenizer directory "
                             "(with tokenizer.json) or the tokenizer.json file of the model that generated the text")
        try:
            self._tok = Tokenizer.from_file(str(f))
        except Exception as e:  # tokenizers raises Exception for a bad file
            raise InputError(f"--tokenizer {f}: not a tokenizers JSON file ({' '.join(str(e).split())[:120]}); "
                             "pass the tokenizer.json a Hugging Face tokenizer saves") from None
        self.file = f
        self.sha256 = hashlib.sha256(f.read_bytes()).hexdigest()

    def count(self, texts: list[str]) -> np.ndarray:
        out = self._tok.encode_batch(texts, add_special_tokens=False)
        return np.fromiter((len(e.ids) for e in out), dtype=np.int64, count=len(texts))
