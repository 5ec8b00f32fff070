"""V0's frozen in-context heads: (context features, context labels, query features) -> logits.

Context labels are the context values thresholded at 0.5 (the authors' code), so a head sees a
binary classification task: C rows labelled 0/1, M query rows to score. Both heads are frozen and
differentiable in the features, so the loss trains the adapter through them.

- `TabPFNHead`: the real `tabpfn` package's model, loaded by its own loader
  (`tabpfn.model_loading.load_model`) from `v0.head.model_path` (paper: a TabPFN-v2.5 classifier
  checkpoint), and called on tensors, skipping the sklearn wrapper's preprocessing and ensembling
  (not differentiable). Binary logit = class-1 logit minus class-0 logit.
  `make_random_tabpfn_checkpoint` writes a randomly initialised v2.5 checkpoint in the package's
  format, for tests: TabPFN zero-initialises every attention output and MLP output projection, so
  such a model passes its input through the residual stream untouched and no gradient reaches the
  features; the checkpoint re-initialises those layers (`reinit_zero=True`).
- `GPHead`: the offline head of the tiny scale, an exact Gaussian-process posterior predictive
  mean over the context labels (GP regression on the 0/1 labels, a.k.a. a least-squares GP
  classifier). Features are standardised with the context's statistics (as TabPFN does), the RBF
  lengthscale is the median pairwise distance of the context (detached), the prior mean is the
  context's smoothed success rate m0 = (k + 1) / (C + 2), the noise variance `noise` times the
  prior variance (the mean depends on that ratio alone). p is the predictive mean clipped to
  [eps, 1 - eps]. With `tune` (Table 6's tuned head) the noise ratio and a lengthscale
  multiplier train with the adapter. Not TabPFN: every table that uses it says 'gp'.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

HEADS = ("gp", "tabpfn")


class GPHead(nn.Module):
    name = "gp"

    def __init__(self, noise: float = 0.5, eps: float = 1e-3):
        super().__init__()
        if not noise > 0:
            raise ValueError(f"v0.head.noise must be > 0, got {noise!r}")
        self.eps = float(eps)
        # frozen unless the head is tuned (Table 6): the noise ratio and a lengthscale multiplier
        self.log_noise = nn.Parameter(torch.tensor(float(noise)).log())
        self.log_ell = nn.Parameter(torch.zeros(()))

    def forward(self, ctx_x: torch.Tensor, ctx_y: torch.Tensor, qry_x: torch.Tensor) -> torch.Tensor:
        """ctx_x (C, F), ctx_y (C,) in {0, 1}, qry_x (M, F) -> logits (M,)."""
        mu, sd = ctx_x.mean(0), ctx_x.std(0, unbiased=False).clamp(min=1e-4)
        a, b = (ctx_x - mu) / sd, (qry_x - mu) / sd
        d_cc = torch.cdist(a, a).pow(2) / a.shape[1]
        d_qc = torch.cdist(b, a).pow(2) / a.shape[1]
        off = d_cc[~torch.eye(len(a), dtype=torch.bool, device=a.device)]
        ell2 = off.detach().median().clamp(min=1e-6) if off.numel() else torch.tensor(1.0, device=a.device)
        ell2 = ell2 * torch.exp(2 * self.log_ell)
        y = ctx_y.to(a.dtype)
        m0 = (y.sum() + 1) / (len(y) + 2)
        K = torch.exp(-0.5 * d_cc / ell2) + torch.exp(self.log_noise) * torch.eye(len(a), dtype=a.dtype, device=a.device)
        k = torch.exp(-0.5 * d_qc / ell2)
        L = torch.linalg.cholesky(K)
        alpha = torch.cholesky_solve((y - m0)[:, None], L)
        p = (m0 + (k @ alpha)[:, 0]).clamp(self.eps, 1 - self.eps)
        return torch.log(p) - torch.log1p(-p)


class TabPFNHead(nn.Module):
    name = "tabpfn"

    def __init__(self, model_path: str | Path):
        super().__init__()
        try:
            from tabpfn.model_loading import load_model
        except ImportError:
            raise ImportError("v0.head.kind 'tabpfn' needs the `tabpfn` package (pip install tabpfn)") from None
        path = Path(model_path)
        if not path.is_file():
            raise FileNotFoundError(f"v0.head.model_path {path} does not exist; point it at a TabPFN "
                                    "classifier checkpoint (paper: TabPFN-v2.5, a local file: nothing "
                                    "is downloaded)")
        model, _criterion, config, _inference = load_model(path=path, estimator_type="classifier")
        if getattr(config, "max_num_classes", 0) < 2:
            raise ValueError(f"{path} is not a classifier checkpoint (max_num_classes "
                             f"{getattr(config, 'max_num_classes', None)})")
        for p in model.parameters():
            p.requires_grad_(False)
        self.model = model.eval()
        self.path = str(path)

    def train(self, mode: bool = True):  # frozen: dropout and the like stay off
        super().train(False)
        return self

    def forward(self, ctx_x, ctx_y, qry_x):
        x = torch.cat([ctx_x, qry_x])[:, None, :]
        out = self.model(x, ctx_y.to(x.dtype)[:, None])  # (M, 1, n_classes)
        return out[:, 0, 1] - out[:, 0, 0]


def make_head(kind: str, **kw) -> nn.Module:
    if kind == "gp":
        return GPHead(**{k: v for k, v in kw.items() if k in ("noise", "eps")})
    if kind == "tabpfn":
        return TabPFNHead(kw["model_path"])
    raise ValueError(f"v0.head.kind must be one of {HEADS}, got {kind!r}")


def make_random_tabpfn_checkpoint(path: str | Path, *, emsize: int = 48, nlayers: int = 2,
                                  nhead: int = 3, num_thinking_rows: int = 8, seed: int = 0,
                                  reinit_zero: bool = True, std: float = 0.02) -> Path:
    """A randomly initialised TabPFN-v2.5 classifier checkpoint in the package's own format (what
    `tabpfn.model_loading.load_model` reads). reinit_zero: draw the layers TabPFN zero-initialises
    from N(0, std) too, or no gradient reaches the input features."""
    from tabpfn.architectures import tabpfn_v2_5 as arch
    from sparserl.core.artifacts import atomic_torch_save
    torch.manual_seed(seed)
    config, _ = arch.parse_config({"emsize": emsize, "nlayers": nlayers, "nhead": nhead,
                                   "features_per_group": 3, "num_thinking_rows": num_thinking_rows,
                                   "max_num_classes": 10})
    model = arch.get_architecture(config)
    if reinit_zero:
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim == 2 and not p.abs().sum():
                    p.normal_(0.0, std)
    return atomic_torch_save({"state_dict": model.state_dict(), "config": asdict(config),
                              "architecture_name": "tabpfn_v2_5"}, path)
