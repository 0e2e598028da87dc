"""Per-token log-probabilities of response tokens under an HF causal LM (padding-aware, batched).

The trainer's reference for the engines: vLLM's sampled-token logprobs (raw logits, temperature
not applied) must match `sequence_logprobs` of the same weights.
"""

from __future__ import annotations

from pathlib import Path

import torch


def token_budget_batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Pack item indices into batches whose padded size (items x longest) stays <= budget tokens.

    Items are taken longest first (first-fit on a sorted order, so padding is small); an item
    longer than the budget gets a batch of its own. Every index appears exactly once.
    """
    if budget < 1:
        raise ValueError(f"token budget must be >= 1, got {budget}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if current and new_longest * (len(current) + 1) > budget:
            batches.append(current)
            current, longest = [], 0
            new_longest = lengths[i]
        current.append(i)
        longest = new_longest
    if current:
        batches.append(current)
    return batches


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def forward_logprobs(model: torch.nn.Module, sequences: list[list[int]], prompt_lens: list[int],
                     temperature: float = 1.0) -> list[torch.Tensor]:
    """One right-padded forward pass; log p(token_t | tokens_<t) for t in [prompt_len, len), with grad.

    Right padding keeps positions 0..len-1 for every row, so no position ids are needed.
    """
    if len(sequences) != len(prompt_lens):
        raise ValueError(f"{len(sequences)} sequences but {len(prompt_lens)} prompt lengths")
    device = model_device(model)
    longest = max(len(s) for s in sequences)
    ids = torch.zeros((len(sequences), longest), dtype=torch.long)
    mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).logits
    out = []
    for row, (seq, p) in enumerate(zip(sequences, prompt_lens)):
        if not 1 <= p <= len(seq):
            raise ValueError(f"sequence {row}: prompt length {p} outside [1, {len(seq)}]")
        step_logits = logits[row, p - 1 : len(seq) - 1].float()
        if temperature != 1.0:
            step_logits = step_logits / temperature
        targets = ids[row, p : len(seq)].to(device)
        logp = torch.log_softmax(step_logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
        out.append(logp)
    return out


@torch.no_grad()
def sequence_logprobs(model: torch.nn.Module, sequences: list[list[int]], prompt_lens: list[int], *,
                      max_batch_tokens: int = 16384, temperature: float = 1.0) -> list[torch.Tensor]:
    """Log-probs (fp32, CPU, 1-D of length len(seq) - prompt_len) of each sequence's response tokens.

    Sequences are packed into forward passes of at most max_batch_tokens padded tokens.
    """
    was_training = model.training
    model.eval()
    try:
        out: list[torch.Tensor | None] = [None] * len(sequences)
        for batch in token_budget_batches([len(s) for s in sequences], max_batch_tokens):
            res = forward_logprobs(model, [sequences[i] for i in batch], [prompt_lens[i] for i in batch],
                                   temperature=temperature)
            for i, lp in zip(batch, res):
                out[i] = lp.float().cpu()
        return out  # type: ignore[return-value]
    finally:
        model.train(was_training)


def load_model(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """An HF causal LM from a local directory or hub id, in eval mode (for reference logprobs)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return model.to(device).eval()
