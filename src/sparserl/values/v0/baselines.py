"""The value baselines V0 is compared with, on pooled embeddings.

Paper: "V_0: A Generalist Value Model for Any Policy at State Zero": the four baselines of its
experimental setup.

- `KNNContextual`: a FIFO buffer of the last `window` (prompt embedding, value) pairs of the
  policy (2048); a query's value is the mean value of its k = 64 nearest buffer entries
  (Euclidean distance on the embedder's mean-pooled states).
- `OutcomeModel`: scores the prompt alone, with no policy context: the paper's reward-model
  baseline (Qwen2.5-Math-RM-72B), here a logistic regression on pooled embeddings fitted to the
  values of the training rows (soft labels, L2 penalty). It measures prompt difficulty, not the
  policy's capability.
- The vanilla coupled value model and the step-wise retrain need the policy's own checkpoints;
  they live with the harvest (the tiny DAG), not here.
"""
from __future__ import annotations

from collections import deque

import numpy as np
import torch


class KNNContextual:
    def __init__(self, k: int = 64, window: int = 2048):
        if k < 1 or window < 1:
            raise ValueError(f"kNN baseline needs k >= 1 and window >= 1, got {k}, {window}")
        self.k, self.buf = int(k), deque(maxlen=int(window))

    def observe(self, embeddings: np.ndarray, values: np.ndarray) -> None:
        self.buf.extend(zip(np.asarray(embeddings, np.float64), np.asarray(values, np.float64)))

    def predict(self, queries: np.ndarray) -> np.ndarray:
        if not self.buf:
            return np.full(len(queries), 0.5)
        x = np.stack([e for e, _ in self.buf])
        v = np.array([r for _, r in self.buf])
        d = ((np.asarray(queries, np.float64)[:, None, :] - x[None]) ** 2).sum(-1)
        k = min(self.k, len(x))
        nn_idx = np.argpartition(d, k - 1, axis=1)[:, :k]
        return v[nn_idx].mean(1)


class OutcomeModel:
    def __init__(self, l2: float = 1e-2, steps: int = 200):
        self.l2, self.steps = float(l2), int(steps)

    def fit(self, x: np.ndarray, values: np.ndarray) -> "OutcomeModel":
        x = np.asarray(x, np.float64)
        self.mu, self.sd = x.mean(0), x.std(0) + 1e-6
        X = torch.tensor((x - self.mu) / self.sd)
        y = torch.tensor(np.asarray(values, np.float64))
        self.w = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
        self.b = torch.zeros((), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([self.w, self.b], max_iter=self.steps, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(X @ self.w + self.b, y) \
                + self.l2 * self.w.pow(2).sum() / len(y)
            loss.backward()
            return loss
        opt.step(closure)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        X = torch.tensor((np.asarray(x, np.float64) - self.mu) / self.sd)
        with torch.no_grad():
            return torch.sigmoid(X @ self.w + self.b).numpy()
