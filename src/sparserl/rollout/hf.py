"""CPU rollouts on transformers: left-padded batches, one KV cache, sampling in our own loop.

Our loop instead of `model.generate` keeps the log-probs exact (no processed scores), applies no
hidden top_k, and finishes in one pass for per-prompt n.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from sparserl.rollout.base import RolloutBackend, RolloutBatch, SamplingParams, expand_n


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return logits
    sorted_logits, idx = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    # drop a token once the mass before it already reaches top_p (the first token always stays)
    drop = (probs.cumsum(-1) - probs) >= top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)


class HFBackend(RolloutBackend):
    def __init__(self, model_or_path, tokenizer=None, batch_size: int = 256,
                 threads: int | None = None):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        if threads:
            torch.set_num_threads(int(threads))
        if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
            from sparserl.core.weights import check_hf_weights
            check_hf_weights(str(model_or_path))  # a truncated or foreign file: named, with the fix
            self.model = AutoModelForCausalLM.from_pretrained(str(model_or_path))
            self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(model_or_path))
        else:
            self.model, self.tokenizer = model_or_path, tokenizer
        self.model.eval()
        self.batch_size = batch_size
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.eos_id

    @torch.no_grad()
    def _generate_rows(self, rows: list[list[int]], params: SamplingParams,
                       gen: torch.Generator):
        B = len(rows)
        L = max(len(r) for r in rows)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, L - len(r):] = torch.tensor(r)
            mask[b, L - len(r):] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1].float()
        next_pos = pos[:, -1:] + 1
        tokens = torch.empty((B, 0), dtype=torch.long)
        lps = torch.empty((B, 0))
        done = torch.zeros(B, dtype=torch.bool)
        temp = 1.0 if params.greedy else params.temperature
        for step in range(params.max_new_tokens):
            logp = torch.log_softmax(logits / temp, dim=-1)
            if params.greedy:
                tok = logp.argmax(-1)
            else:
                probs = torch.softmax(_top_p_filter(logits / temp, params.top_p), dim=-1)
                tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
            tokens = torch.cat([tokens, tok[:, None]], 1)
            lps = torch.cat([lps, logp.gather(-1, tok[:, None])], 1)
            done = done | (tok == self.eos_id)
            if bool(done.all()) or step == params.max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones((B, 1), dtype=torch.long)], 1)
            out = self.model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos,
                             past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1].float()
            next_pos = next_pos + 1
        res_ids, res_lp, finish = [], [], []
        for b in range(B):
            t = tokens[b].tolist()
            if self.eos_id in t:
                k = t.index(self.eos_id) + 1  # keep EOS: the trainer scores its log-prob too
                res_ids.append(t[:k]); res_lp.append(lps[b, :k].numpy()); finish.append("stop")
            else:
                res_ids.append(t); res_lp.append(lps[b].numpy()); finish.append("length")
        return res_ids, res_lp, finish

    def generate(self, prompts: Sequence[str], n, params: SamplingParams, seed: int) -> RolloutBatch:
        n_arr = expand_n(n, len(prompts))
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        index = np.repeat(np.arange(len(prompts)), n_arr)
        # group rows by prompt length so batches carry little padding
        order = np.argsort([len(prompt_ids[i]) for i in index], kind="stable")
        resp: list = [None] * len(index)
        lps: list = [None] * len(index)
        fin: list = [None] * len(index)
        for c, start in enumerate(range(0, len(order), self.batch_size)):
            chunk = order[start:start + self.batch_size]
            gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + c)
            r, lp, f = self._generate_rows([prompt_ids[index[m]] for m in chunk], params, gen)
            self._rows_done(len(chunk))
            for j, m in enumerate(chunk):
                resp[m], lps[m], fin[m] = r[j], lp[j], f[j]
        # no rollouts at all: batch_decode([]) would return one phantom "" text
        texts = self.tokenizer.batch_decode(
            [[t for t in r if t != self.eos_id] for r in resp], skip_special_tokens=True) if resp else []
        return RolloutBatch(prompts=list(prompts), prompt_ids=prompt_ids, prompt_index=index,
                            response_ids=resp, logprobs=lps, texts=texts, finish_reason=fin)
