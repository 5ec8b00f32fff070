"""V0 as V0.5's prior (prior kind 'v0'): p(x | C) for a step's prompts, where C is the run's
support buffer (the 512 most recent (prompt, reward) pairs, 256 sampled per step; values.support).

The adapter is frozen once trained, so a prompt's features never change: they are computed once
per prompt and cached, and a call costs the head's solve over the context (perf/v0_latency.py).
Context rewards are single rollouts in {0, 1}, the labels the head takes. With an empty buffer
(the first step) the prior knows nothing and says 0.5 for every prompt.

`make_v0_prior(spec, seed, cfg, model=, pool=, embeddings=)` is the registered factory: it loads
the trained V0 (`model`, or `spec['model']`) and embeds the RL pool's prompts with V0's embedder
(cached beside the model).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from sparserl.values.v0.embedder import EmbeddingTable
from sparserl.values.v0.model import V0, load_v0


class V0Prior:
    def __init__(self, model: V0, table: EmbeddingTable, *, batch: int = 512):
        self.model, self.table, self.batch = model.eval(), table, int(batch)
        self._feat: dict[Any, torch.Tensor] = {}

    @torch.no_grad()
    def features(self, ids: Sequence) -> torch.Tensor:
        missing = list(dict.fromkeys(i for i in ids if i not in self._feat))
        for s in range(0, len(missing), self.batch):
            chunk = missing[s:s + self.batch]
            f = self.model.features(*self.table.get(chunk, device=self.model.device))
            self._feat.update(zip(chunk, f))
        return torch.stack([self._feat[i] for i in ids]) if len(ids) else torch.zeros(0)

    @torch.no_grad()
    def __call__(self, prompt_ids: Sequence, context: Any = None) -> np.ndarray:
        ids = list(prompt_ids)
        pairs = list(context or [])
        if not pairs:
            return np.full(len(ids), 0.5)
        cids, rewards = zip(*pairs)
        cf = self.features(list(cids))
        qf = self.features(ids)
        logits = self.model.predict_from_features(cf, torch.tensor(rewards, dtype=cf.dtype, device=cf.device), qf)
        return torch.sigmoid(logits).double().cpu().numpy()

    def __repr__(self) -> str:
        return f"V0Prior({self.model.config['embedder']}, head {self.model.config['head'].get('kind')})"


def pool_embeddings(cfg: dict, s: dict | None, path: Path, pool: Path, log=None, embedder_policy: Path | None = None):
    """The prompts of the RL pool `pool` embedded once, cached at `path` (rule v0_pool_embeddings
    passes both, and an embedder of kind `policy` its policy's folder; loaded when its prompts are
    the pool's)."""
    from sparserl.core.artifacts import read_table
    from sparserl.values.v0.experiments import embedding_table, query_text
    from sparserl.values.v0.settings import v0_settings
    s = s or v0_settings(cfg)
    pool, path = read_table(pool), Path(path)
    texts = {i: query_text(cfg, p) for i, p in zip(pool["id"], pool["problem"])}
    return embedding_table(cfg, s, texts, path, log=log, embedder_policy=embedder_policy)


def make_v0_prior(spec: dict | None = None, seed: int = 0, cfg: dict | None = None, *, pool: Path | None = None,
                  embeddings: Path | None = None, model: Path | None = None, **_) -> V0Prior:
    """V0 `model` (`spec['model']` in its place when set) over the pool's embeddings: `embeddings`'
    file name beside the model (`Paths.v0_pool_embeddings`), computed from `pool` when missing.
    The caller passes the files (the run's `RunInputs`)."""
    from sparserl.values.v0.settings import v0_device, v0_settings
    missing = [k for k, v in (("cfg", cfg), ("pool", pool), ("embeddings", embeddings),
                              ("model", model or (spec or {}).get("model"))) if v is None]
    if missing:  # the registry's callers pass them as keywords (the local trainer: its RunInputs)
        raise ValueError(f"the v0 prior needs the run's config and files: {', '.join(missing)} missing "
                         "(cfg=, and the run's RunInputs pool, v0_embeddings and v0_model)")
    path = Path((spec or {}).get("model") or model)
    s = v0_settings(cfg)
    v0 = load_v0(path, device=v0_device(s))
    table = pool_embeddings(cfg, s, path.with_name(Path(embeddings).name), pool)
    if table.embedder != v0.config["embedder"]:
        raise ValueError(f"{path} was trained on {v0.config['embedder']} embeddings but v0.embedder "
                         f"gives {table.embedder}; retrain V0 (rule v0_table) or fix v0.embedder")
    return V0Prior(v0, table)
