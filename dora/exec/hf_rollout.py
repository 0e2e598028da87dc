"""Sampling with transformers generate, with behaviour logprobs, for tests, measurements and the
tiny model's warm-start evaluation (the runs themselves sample on the rollout engines)."""

from __future__ import annotations

import torch

from dora.exec.trainer import Trajectory


@torch.no_grad()
def hf_rollout(model, tokenizer, prompt_ids: list[list[int]], group_ids: list[int], *, group_size: int,
               max_new_tokens: int, temperature: float = 1.0, seed: int = 0, version: int = 0,
               batch_size: int = 64, logprob_temperature: float = 1.0) -> list[tuple[Trajectory, str]]:
    """Sample group_size responses per prompt with transformers generate; behaviour logprobs are the
    log-probs of the sampled tokens under log_softmax(logits / logprob_temperature) (1: the raw
    logits, as vLLM reports them; the sampling temperature: the sampling policy's). Reward is left at 0.

    Returns (trajectory, completion text) pairs, group by group.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    jobs = [(p, g) for p, g in zip(prompt_ids, group_ids) for _ in range(group_size)]
    out: list[tuple[Trajectory, str]] = []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start : start + batch_size]
        longest = max(len(p) for p, _ in chunk)
        ids = torch.full((len(chunk), longest), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, (p, _) in enumerate(chunk):  # left padding for generation
            ids[r, longest - len(p):] = torch.tensor(p)
            mask[r, longest - len(p):] = 1
        gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True,
                             temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                             eos_token_id=eos, pad_token_id=pad, output_logits=True, return_dict_in_generate=True)
        new = gen.sequences[:, longest:].cpu()
        logits = torch.stack(gen.logits, dim=1).float().cpu() / logprob_temperature  # [B, T, V], raw / T
        logp_all = torch.log_softmax(logits, dim=-1).gather(-1, new[..., None]).squeeze(-1)
        for r, (p, g) in enumerate(chunk):
            toks = new[r].tolist()
            n = toks.index(eos) + 1 if eos in toks else len(toks)
            resp = toks[:n]
            text = tokenizer.decode(resp, skip_special_tokens=True)
            traj = Trajectory(list(p), resp, logp_all[r, :n].tolist(), version, g, 0.0,
                              finish_reason="stop" if resp and resp[-1] == eos else "length")
            out.append((traj, text))
    model.train(was_training)
    return out
