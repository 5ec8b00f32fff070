"""Policy losses of the local trainer: PPO-clip (GRPO/DAPO clip-higher), GSPO, GPG, and a KL term.

All take per-token tensors of shape (N, T) with a 0/1 `mask` over response tokens, and either one
advantage per sequence (N,) (outcome rewards: every token of a response shares it) or one per
token (N, T') from a token-level estimator (Le Critique's critics; T' >= T, cut to T).
"""
from __future__ import annotations

import torch


def token_advantages(adv: torch.Tensor, T: int) -> torch.Tensor:
    """(N, T) advantages: a sequence advantage broadcast over its tokens, or token-level ones cut
    to the micro-batch's longest response."""
    return adv[:, None] if adv.ndim == 1 else adv[:, :T]


def aggregate(loss_t: torch.Tensor, mask: torch.Tensor, agg: str) -> torch.Tensor:
    """token_mean: DAPO's token-level mean over the batch; seq_mean_token_mean: GRPO's mean of
    per-sequence token means; seq_mean_token_sum: Dr.GRPO-style sums per sequence."""
    mask = mask.to(loss_t.dtype)
    if agg == "token_mean":
        return (loss_t * mask).sum() / mask.sum().clamp(min=1)
    per_seq = (loss_t * mask).sum(-1)
    if agg == "seq_mean_token_mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1)
    elif agg != "seq_mean_token_sum":
        raise ValueError(f"unknown loss aggregation {agg!r}")
    return per_seq.mean()


def ppo_clip_loss(logp, old_logp, adv, mask, clip_low=0.2, clip_high=0.2, agg="seq_mean_token_mean"):
    """-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A); eps_high > eps_low is DAPO's clip-higher."""
    ratio = torch.exp(logp - old_logp)
    a = token_advantages(adv, logp.shape[1])
    loss_t = -torch.minimum(ratio * a, ratio.clamp(1 - clip_low, 1 + clip_high) * a)
    clipped = ((ratio < 1 - clip_low) | (ratio > 1 + clip_high)).to(logp.dtype)
    return aggregate(loss_t, mask, agg), aggregate(clipped, mask, "token_mean")


def gspo_loss(logp, old_logp, adv, mask, clip_low=3e-4, clip_high=4e-4, agg="seq_mean_token_mean"):
    """GSPO: sequence ratio s = exp(mean_t log(pi/pi_old)), clipped at 1 +- eps
    ("Group Sequence Policy Optimization", Zheng et al. 2025, arXiv 2507.18071).

    The token form s_t = sg(s) * pi_t / sg(pi_t) carries the sequence ratio's value with
    per-token gradients, as the GSPO paper's GSPO-token variant does."""
    m = mask.to(logp.dtype)
    seq_log_ratio = ((logp - old_logp) * m).sum(-1) / m.sum(-1).clamp(min=1)
    s = torch.exp(seq_log_ratio)
    s_t = s.detach()[:, None] * torch.exp(logp - logp.detach())
    a = token_advantages(adv, logp.shape[1])
    loss_t = -torch.minimum(s_t * a, s_t.clamp(1 - clip_low, 1 + clip_high) * a)
    clipped = ((s < 1 - clip_low) | (s > 1 + clip_high)).to(logp.dtype)
    return aggregate(loss_t, mask, agg), clipped.mean()


def gpg_loss(logp, old_logp, adv, mask, agg="seq_mean_token_mean", **_):
    """GPG: plain policy gradient -A log pi, no ratio, no clip. The B/B_valid scale is already in
    the advantages (the `gpg` estimator multiplies it in)."""
    return aggregate(-token_advantages(adv, logp.shape[1]) * logp, mask, agg), torch.zeros((), dtype=logp.dtype)


LOSSES = {"ppo_clip": ppo_clip_loss, "gspo": gspo_loss, "gpg": gpg_loss}


def kl_k3(logp, ref_logp):
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(d) - d - 1 with d = ref - logp."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def token_logprobs(model, seqs: list[list[int]], prompt_lens: list[int], pad_id: int,
                   with_entropy: bool = False, share_prompts: bool = False):
    """Log-probs of each response token (positions after the prompt), right-padded to (N, T).

    Returns (logp, mask[, entropy]); T is the longest response. A model with `hidden` (our Qwen3LM)
    runs its LM head and log-softmax on the response positions only: prompt and padding positions
    are a third to a half of a batch's. `share_prompts` (`rl.share_prompts`, our Qwen3LM): rows
    with the same prompt share one pass over it (`Qwen3LM.hidden_shared`)."""
    if share_prompts and hasattr(model, "hidden_shared"):
        return _shared_logprobs(model, seqs, prompt_lens, pad_id, with_entropy)
    lens = torch.tensor([len(s) for s in seqs])
    L = int(lens.max())
    ids = _right_padded(seqs, L, pad_id)
    attn = (torch.arange(L)[None] < lens[:, None]).long()
    # response token t of row i is predicted at position p_i - 1 + t: one gather for all rows
    # (a slice and a pad per row cost a dozen autograd ops each, most of a tiny model's update)
    plen = torch.tensor(prompt_lens)
    rlen = lens - plen
    T = int(rlen.max())
    t = torch.arange(T)
    mask_b = t[None] < rlen[:, None]
    pos = torch.where(mask_b, plen[:, None] - 1 + t[None], 0)
    if hasattr(model, "hidden"):
        h = model.hidden(ids, attn)
        logits = model.lm_head(h.gather(1, pos[..., None].expand(-1, -1, h.shape[-1]))).float()
    else:
        logits = model(input_ids=ids, attention_mask=attn).logits.float()
        logits = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1]))
    return _response_logprobs(logits, ids.gather(1, pos + 1), mask_b, with_entropy)


def _right_padded(rows: list[list[int]], width: int, pad_id: int) -> torch.Tensor:
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def _response_logprobs(logits, targets, mask_b, with_entropy: bool):
    """(logp, mask[, entropy]) of `targets` [N, T] under `logits` [N, T, V], zero where ~mask_b."""
    logp_all = torch.log_softmax(logits, -1)
    zero = torch.zeros((), dtype=logp_all.dtype)
    out = torch.where(mask_b, logp_all.gather(-1, targets[..., None]).squeeze(-1), zero)
    mask = mask_b.to(torch.float32)
    if with_entropy:
        ent = -(logp_all.detach().exp() * logp_all.detach()).sum(-1)
        return out, mask, torch.where(mask_b, ent, zero)
    return out, mask


def _shared_logprobs(model, seqs, prompt_lens, pad_id: int, with_entropy: bool):
    """`token_logprobs` with each distinct prompt of the rows run once."""
    first: dict = {}
    row_prompt = torch.tensor([first.setdefault(tuple(s[:p]), len(first)) for s, p in zip(seqs, prompt_lens)])
    prompts = [list(k) for k in first]
    plen = torch.tensor([len(p) for p in prompts])
    rlen = torch.tensor([len(s) - p for s, p in zip(seqs, prompt_lens)])
    T = max(int(rlen.max()), 1)
    pids = _right_padded(prompts, int(plen.max()), pad_id)
    resp = _right_padded([s[p:] for s, p in zip(seqs, prompt_lens)], T, pad_id)
    # the hidden states predicting response tokens 0..T-1: the prompt's last, then tokens 0..T-2
    h = model.hidden_shared(pids, plen, resp[:, :max(T - 1, 1)], row_prompt)[:, :T]
    return _response_logprobs(model.lm_head(h).float(), resp, torch.arange(T)[None] < rlen[:, None], with_entropy)
