"""V0 = frozen embedder states -> Residual Query Adapter (trains) -> frozen in-context head.

`V0.forward(ctx_states, ctx_mask, ctx_values, qry_states, qry_mask)` -> logits of the queries:
the context values are thresholded at 0.5 into the head's labels (the authors' code). The
embedder runs once per prompt, outside the model (`embedder.EmbeddingTable`); at inference the
adapter's features of the context prompts can be cached too (`features`), since only the queries
change within a step (`predict_from_features`).

`save_v0` / `load_v0` keep the adapter's weights with the config that built it (head, embedder
name and dimension), in one file written atomically.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from sparserl.core.config import section_setting
from sparserl.values.v0.adapter import ResidualQueryAdapter
from sparserl.values.v0.heads import make_head

ADAPTER_KEYS = ("n_static", "proj_dim", "n_heads", "d_attn", "d_residual", "connector")


class V0(nn.Module):
    def __init__(self, d_embed: int, adapter: dict | None = None, head: dict | None = None,
                 embedder: str = "?"):
        super().__init__()
        adapter = dict(adapter or {})
        head = dict(head or {"kind": "gp"})
        unknown = set(adapter) - set(ADAPTER_KEYS)
        if unknown:
            raise ValueError(f"v0.adapter has unknown keys {sorted(unknown)}; known: {ADAPTER_KEYS}")
        self.config = {"d_embed": int(d_embed), "adapter": adapter, "head": head, "embedder": embedder}
        self.adapter = ResidualQueryAdapter(d_embed, **adapter)
        kind = section_setting(head, "v0", "head", "kind")
        self.head = make_head(kind, **{k: v for k, v in head.items() if k != "kind"})
        self.tune_head = bool(section_setting(head, "v0", "head", "tune"))
        if not self.tune_head:
            for p in self.head.parameters():
                p.requires_grad_(False)

    @property
    def device(self) -> torch.device:
        """Where the model's parameters live (`v0.device`; `.to(device)` moves it)."""
        p = next(self.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def features(self, states, mask) -> torch.Tensor:
        return self.adapter(states, mask)

    def predict_from_features(self, ctx_f, ctx_values, qry_f) -> torch.Tensor:
        labels = (torch.as_tensor(ctx_values, dtype=ctx_f.dtype, device=ctx_f.device) >= 0.5).to(ctx_f.dtype)
        return self.head(ctx_f, labels, qry_f)

    def forward(self, ctx_states, ctx_mask, ctx_values, qry_states, qry_mask) -> torch.Tensor:
        f = self.features(torch.cat([_pad(ctx_states, qry_states.shape[1]), _pad(qry_states, ctx_states.shape[1])]),
                          torch.cat([_pad(ctx_mask, qry_mask.shape[1]), _pad(qry_mask, ctx_mask.shape[1])]))
        n = ctx_states.shape[0]
        return self.predict_from_features(f[:n], ctx_values, f[n:])


def _pad(x: torch.Tensor, t: int) -> torch.Tensor:
    """Right-pad the token axis to at least t (zeros / False)."""
    if x.shape[1] >= t:
        return x
    shape = list(x.shape)
    shape[1] = t - x.shape[1]
    return torch.cat([x, torch.zeros(shape, dtype=x.dtype, device=x.device)], dim=1)


def save_v0(model: V0, path: str | Path, extra: dict | None = None) -> Path:
    from sparserl.core.artifacts import atomic_torch_save

    def cpu(sd):  # a file trained on a GPU loads anywhere
        return {k: v.cpu() for k, v in sd.items()}
    return atomic_torch_save({"config": model.config, "adapter": cpu(model.adapter.state_dict()),
                              "head": cpu(model.head.state_dict()) if model.tune_head else None,
                              "extra": extra or {}}, path)


def load_v0(path: str | Path, device: str | torch.device = "cpu") -> V0:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no V0 model at {path}; train it first (rule v0_train)")
    d = torch.load(str(path), map_location="cpu", weights_only=False)
    c = d["config"]
    model = V0(c["d_embed"], c["adapter"], c["head"], c["embedder"])
    model.adapter.load_state_dict(d["adapter"])
    if d.get("head") is not None:
        model.head.load_state_dict(d["head"])
    return model.to(device).eval()
