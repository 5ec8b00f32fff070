"""The coupled value models V0 is compared with (V0 §4.1): the policy's own architecture with a
linear head on the last prompt token, trained with MSE on the avg@k value.

- `VanillaValueModel` (the PPO critic's setting): initialised from the start policy, a cold start
  of `epochs` epochs on the start policy's rows, then `epochs` more on each later checkpoint's
  rows, in order. It predicts a checkpoint's test queries after training on that checkpoint's
  held-out rows (the most it could know; it still has to chase the policy with gradient steps).
- `stepwise_retrain`: a fresh model (from the start policy) trained from scratch at every
  checkpoint on all of that checkpoint's held-out rows: the expensive reference.
The paper uses batch 32 and lr 1e-5 on 1.5B-7B models; the tiny policies need a larger step
(`lr`, set by the caller from `v0.baselines`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

GROUP = ["model", "step"]


class _ValueHead(nn.Module):
    def __init__(self, policy_dir: str | Path):
        super().__init__()
        from sparserl.models.qwen3 import Qwen3LM
        self.lm = Qwen3LM.from_dir(policy_dir)
        self.head = nn.Linear(self.lm.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.constant_(self.head.bias, 0.5)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.lm.hidden(ids, mask)
        last = mask.long().sum(1) - 1
        return self.head(h[torch.arange(len(ids)), last]).squeeze(-1)


class _Tokens:
    """Right-padded token ids of prompt texts, by query id (the policy's tokenizer)."""

    def __init__(self, policy_dir: str | Path, texts: dict):
        from sparserl.rollout.cpu_engine import load_tokenizer
        tok = load_tokenizer(Path(policy_dir))
        enc = {k: tok(t, add_special_tokens=False)["input_ids"] for k, t in texts.items()}
        self.pad = tok.pad_token_id or 0
        self.enc = enc

    def batch(self, ids) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = [self.enc[i] for i in ids]
        T = max(len(s) for s in seqs)
        x = torch.full((len(seqs), T), self.pad, dtype=torch.long)
        m = torch.zeros((len(seqs), T), dtype=torch.bool)
        for r, s in enumerate(seqs):
            x[r, :len(s)] = torch.tensor(s, dtype=torch.long)
            m[r, :len(s)] = True
        return x, m


def _fit(model, tokens, rows: pd.DataFrame, epochs: int, lr: float, batch: int, rng, opt=None):
    opt = opt or torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    ids, y = rows["query_id"].to_numpy(), torch.tensor(rows["value"].to_numpy(), dtype=torch.float32)
    for _ in range(epochs):
        order = rng.permutation(len(rows))
        for s in range(0, len(order), batch):
            b = order[s:s + batch]
            x, m = tokens.batch(ids[b])
            loss = torch.nn.functional.mse_loss(model(x, m), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    return opt


@torch.no_grad()
def _predict(model, tokens, rows: pd.DataFrame, batch: int = 256) -> np.ndarray:
    ids = rows["query_id"].to_numpy()
    out = [model(*tokens.batch(ids[s:s + batch])).clamp(0, 1).numpy() for s in range(0, len(ids), batch)]
    return np.concatenate(out) if out else np.zeros(0)


def coupled_predictions(timeline: pd.DataFrame, texts: dict, policy_dirs: dict, *, epochs: int = 5,
                        lr: float = 1e-4, batch: int = 32, seed: int = 0, stepwise: bool = False) -> pd.DataFrame:
    """p for the timeline's test rows from the vanilla value model (or, stepwise=True, a fresh one
    per checkpoint). policy_dirs: model name -> the start policy's checkpoint directory."""
    out = []
    for model_name, g in timeline.groupby("model", sort=True):
        torch.manual_seed(seed)
        rng = np.random.default_rng([seed, 3])
        tokens = _Tokens(policy_dirs[model_name], texts)
        vm, opt = None, None
        for step, c in g.groupby("step", sort=True):
            fit_rows = c[c["role"].isin(["context", "train"])]
            if stepwise or vm is None:
                vm, opt = _ValueHead(policy_dirs[model_name]), None
            opt = _fit(vm, tokens, fit_rows, epochs, lr, batch, rng, None if stepwise else opt)
            test = c[c["role"] == "test"]
            out.append(test.assign(p=_predict(vm, tokens, test)))
    return pd.concat(out) if out else timeline.iloc[:0].assign(p=[])
