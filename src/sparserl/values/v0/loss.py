"""V0's training objective: L = (1 - alpha) softCE + alpha rank.

"V_0: A Generalist Value Model for Any Policy at State Zero" names the two terms and alpha = 0.25
in its implementation details and defines L_rank in the appendix on Theorem A.3's context
shortcut; how they are weighted is our reading of the authors' code.

- softCE: binary cross-entropy of p = sigmoid(s) against the soft label v = avg@10 in [0, 1].
- rank:   -log sigmoid(s_i - s_j) averaged over the pairs of one query batch (one context) with
          v_i >= 0.5 > v_j; 0 when the batch has no such pair.
alpha = 0.25. `mode` gives Table 6's ablations: 'both', 'ce' (alpha = 0), 'rank' (alpha = 1).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

LOSS_MODES = ("both", "ce", "rank")


def rank_loss(logits: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    pos, neg = values >= 0.5, values < 0.5
    if not (pos.any() and neg.any()):
        return logits.sum() * 0.0
    diff = logits[pos][:, None] - logits[neg][None, :]
    return F.softplus(-diff).mean()


def v0_loss(logits: torch.Tensor, values: torch.Tensor, alpha: float = 0.25,
            mode: str = "both") -> torch.Tensor:
    if mode not in LOSS_MODES:
        raise ValueError(f"v0.train.loss must be one of {LOSS_MODES}, got {mode!r}")
    a = {"both": float(alpha), "ce": 0.0, "rank": 1.0}[mode]
    ce = F.binary_cross_entropy_with_logits(logits, values.to(logits.dtype))
    return (1 - a) * ce + a * rank_loss(logits, values) if a else ce
