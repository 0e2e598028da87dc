"""The tiny model's tokenizer: a small byte-level BPE built locally with `tokenizers`.

It uses exactly Qwen2's pipeline (NFC, Qwen2's split regex, byte-level bytes, digits one
by one), because transformers 5 loads any `model_type: qwen2` checkpoint's tokenizer as
Qwen2Tokenizer, which rebuilds that pipeline from the saved vocab and merges. So
AutoTokenizer, the saved tokenizer.json and vLLM all tokenize the same way.

Vocabulary: <pad>, <bos>, <eos>, <|endoftext|> (Qwen2Tokenizer's unk), the 256 byte symbols (any text encodes; digits are single
tokens, as in Qwen2), and merges that make the task's words single tokens ("count",
" count", " to", ...). No <bos> is added on encode (as Qwen2); generation ends at <eos>.
"""

from __future__ import annotations

SPECIAL = ["<pad>", "<bos>", "<eos>", "<|endoftext|>"]
PAD, BOS, EOS, UNK = 0, 1, 2, 3
# Qwen2's pre-tokenizer split (transformers/models/qwen2/tokenization_qwen2.py).
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
WORDS = ["count", "from", "to", "repeat", "times", "list", "answer", "is", "the", "boxed", "what",
         "sum", "of", "and", "step", "by", "down", "up", "Answer", "Count", "Question"]
PUNCT = [":", "=", "+", "-", "*", "/", "(", ")", ",", ".", "?", "{", "}", "\\", "^", "%", "$"]


def _byte_alphabet() -> list[str]:
    from tokenizers import pre_tokenizers

    return sorted(pre_tokenizers.ByteLevel.alphabet())


def _bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """Split word into BPE pieces under merges `ranks` (lowest rank merges first)."""
    pieces = list(word)
    while len(pieces) > 1:
        pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(pieces, pieces[1:]))]
        rank, i = min(pairs)
        if rank == 1 << 30:
            break
        pieces[i : i + 2] = [pieces[i] + pieces[i + 1]]
    return pieces


def vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Token -> id and the BPE merges, in a fixed order (deterministic).

    Each word gets merges that join the pieces the earlier merges leave, left to right; merges
    added later rank lower, so they never split an earlier word (each word stays one token).
    """
    tokens = list(SPECIAL) + _byte_alphabet()
    merges: list[tuple[str, str]] = []
    ranks: dict[tuple[str, str], int] = {}
    seen = set(tokens)
    pieces = [w for word in WORDS for w in (word, "Ġ" + word)] + ["Ġ" + p for p in PUNCT]
    for piece in pieces:
        parts = _bpe(piece, ranks)
        while len(parts) > 1:
            left, right = parts[0], parts[1]
            ranks[(left, right)] = len(merges)
            merges.append((left, right))
            if left + right not in seen:
                tokens.append(left + right)
                seen.add(left + right)
            parts = [left + right] + parts[2:]
    return {t: i for i, t in enumerate(tokens)}, merges


def build_tokenizer():
    """A transformers tokenizer (TokenizersBackend / PreTrainedTokenizerFast) over the tiny vocabulary."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab, merges = vocab_and_merges()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None,
                               continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                               byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        unk_token="<|endoftext|>", model_max_length=4096, padding_side="left", clean_up_tokenization_spaces=False)

