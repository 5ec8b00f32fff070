"""The Residual Query Adapter: token states -> 1008 features per prompt.

Paper: "V_0: A Generalist Value Model for Any Policy at State Zero", Figure 2 (Table 6: variants).

    Q(x)  = Q_static + G(h_last(x))            N_static queries of width d_attn, G zero-initialised
    O(x)  = MHA(Q(x), keys = values = H(x))    n_heads heads over the embedder's token states H(x)
    f(x)  = flatten(W_proj LN(O(x)))            each query -> proj_dim numbers: 168 x 6 = 1008

Choices the paper leaves open, taken from the authors' public code where it says, ours otherwise:
- the residual generator G reads last-token pooling of the (layer-normed) states and is a
  two-layer MLP whose output layer starts at zero, so training starts from the static queries;
- keys and values come from a parameter-free LayerNorm of the states (Qwen3-Embedding's and
  MiniLM's state scales differ by orders of magnitude);
- one projection W_proj is shared by all queries (queries differ by what they attend to).

`connector` picks Table 6's variants: 'residual' (the above, V0's), 'static' (no G), 'pool'
(mean-pooled states through one linear layer to the same width: no attention at all).
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

CONNECTORS = ("residual", "static", "pool")


class ResidualQueryAdapter(nn.Module):
    def __init__(self, d_embed: int, *, n_static: int = 168, proj_dim: int = 6, n_heads: int = 3,
                 d_attn: int = 48, d_residual: int = 64, connector: str = "residual"):
        super().__init__()
        if connector not in CONNECTORS:
            raise ValueError(f"v0.adapter.connector must be one of {CONNECTORS}, got {connector!r}")
        if d_attn % n_heads:
            raise ValueError(f"v0.adapter.d_attn ({d_attn}) must be divisible by n_heads ({n_heads})")
        self.connector, self.n_static, self.proj_dim = connector, int(n_static), int(proj_dim)
        self.n_features = self.n_static * self.proj_dim
        if connector == "pool":
            self.linear = nn.Linear(d_embed, self.n_features)
            return
        self.static = nn.Parameter(torch.randn(n_static, d_attn) * d_attn ** -0.5)
        if connector == "residual":
            self.generator = nn.Sequential(nn.Linear(d_embed, d_residual), nn.GELU(),
                                           nn.Linear(d_residual, n_static * d_attn))
            nn.init.zeros_(self.generator[2].weight)
            nn.init.zeros_(self.generator[2].bias)
        self.attn = nn.MultiheadAttention(d_attn, n_heads, kdim=d_embed, vdim=d_embed, batch_first=True)
        self.norm = nn.LayerNorm(d_attn)
        self.proj = nn.Linear(d_attn, proj_dim)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """states (B, T, d_embed), mask (B, T) bool -> features (B, n_static * proj_dim)."""
        h = F.layer_norm(states, states.shape[-1:])
        m = mask.to(h.dtype)
        if self.connector == "pool":
            pooled = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1)
            return self.linear(pooled)
        B = h.shape[0]
        q = self.static.expand(B, -1, -1)
        if self.connector == "residual":
            last = (m.cumsum(1) * m).argmax(1)  # the last real token, whichever side the padding is
            q = q + self.generator(h[torch.arange(B, device=h.device), last]).view(B, self.n_static, -1)
        o, _ = self.attn(q, h, h, key_padding_mask=~mask.bool(), need_weights=False)
        return self.proj(self.norm(o)).flatten(1)
