"""The Qwen3 decoder of transformers' `Qwen3ForCausalLM` in plain torch, for training tiny policies.

The local RL trainer loads, trains and saves the tiny policies with this module: the same
parameter names, the same checkpoint files (config.json, model.safetensors, the tokenizer's), so
transformers, the CPU rollout engine and vLLM read what it writes. It exists for speed: a trainer
job that imports transformers spends about 3 s on the import alone, more than a tiny RL run's
updates, and transformers' forward adds a few milliseconds of bookkeeping to each step of a
model with 0.2M parameters. Tests pin its logits and gradients to transformers' (1e-5).

Scope: causal LM training on right-padded batches (a row's pad tokens come after its tokens, so
causal attention never lets a real position see one). Pre-training and every other architecture
keep transformers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LMOutput:
    """What a transformers causal LM returns, as far as the trainer reads it."""
    logits: torch.Tensor


class _Config(dict):
    """config.json as attributes (what the rollout engine and the trainer read)."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def to_dict(self) -> dict:
        return dict(self)


class _RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # transformers' Qwen3RMSNorm: normalise in float32, cast back, then scale
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class _Attention(nn.Module):
    def __init__(self, c: _Config):
        super().__init__()
        self.nh, self.kvh = c.num_attention_heads, c.num_key_value_heads
        self.hd = c.get("head_dim") or c.hidden_size // self.nh
        bias = bool(c.get("attention_bias", False))
        self.q_proj = nn.Linear(c.hidden_size, self.nh * self.hd, bias=bias)
        self.k_proj = nn.Linear(c.hidden_size, self.kvh * self.hd, bias=bias)
        self.v_proj = nn.Linear(c.hidden_size, self.kvh * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.nh * self.hd, c.hidden_size, bias=bias)
        self.q_norm = _RMSNorm(self.hd, c.rms_norm_eps)
        self.k_norm = _RMSNorm(self.hd, c.rms_norm_eps)

    @staticmethod
    def _rotate(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.kvh, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kvh, self.hd).transpose(1, 2)
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        # attention in float32 under a bf16 autocast too: CPU's bf16 flash-attention backward
        # took 8x its float32 time (perf/rl_step.py)
        with torch.autocast("cpu", enabled=False):
            att = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True,
                                                 enable_gqa=self.kvh != self.nh)
        return self.o_proj(att.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class _MLP(nn.Module):
    def __init__(self, c: _Config):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    def __init__(self, c: _Config):
        super().__init__()
        self.input_layernorm = _RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = _Attention(c)
        self.post_attention_layernorm = _RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = _MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_shared(self, x, cos, sin, U: int, Lp: int, row_prompt, mask):
        """One layer over the tokens x [N, d] of U unique prompts of Lp slots each, then of the
        responses (R rows of Lr slots): projections and MLP over all N tokens at once; in the
        attention the prompts attend causally among themselves, each response to its prompt's keys
        (row_prompt [R]) and causally to its own, as `mask` [R, 1, Lr, Lp + Lr] allows."""
        a, N = self.self_attn, x.shape[0]
        h = self.input_layernorm(x)
        q = a._rotate(a.q_norm(a.q_proj(h).view(N, a.nh, a.hd)), cos, sin).float()
        k = a._rotate(a.k_norm(a.k_proj(h).view(N, a.kvh, a.hd)), cos, sin).float()
        v = a.v_proj(h).view(N, a.kvh, a.hd).float()
        P, R = U * Lp, row_prompt.shape[0]
        Lr = (N - P) // R
        qp, kp, vp = (t[:P].view(U, Lp, -1, a.hd).transpose(1, 2) for t in (q, k, v))
        qr, kr, vr = (t[P:].view(R, Lr, -1, a.hd).transpose(1, 2) for t in (q, k, v))
        with torch.autocast("cpu", enabled=False):
            op = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=a.kvh != a.nh)
            orr = F.scaled_dot_product_attention(qr, torch.cat((kp[row_prompt], kr), 2),
                                                 torch.cat((vp[row_prompt], vr), 2), attn_mask=mask,
                                                 enable_gqa=a.kvh != a.nh)
        att = torch.cat((op.transpose(1, 2).reshape(P, -1), orr.transpose(1, 2).reshape(N - P, -1)))
        x = x + a.o_proj(att)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Model(nn.Module):
    def __init__(self, c: _Config):
        super().__init__()
        # transformers' padding_idx: the pad row gets no gradient from the lookup (right padding
        # feeds pad tokens, and the RMSNorm of a near-zero row has a huge gradient)
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=c.get("pad_token_id"))
        self.layers = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = _RMSNorm(c.hidden_size, c.rms_norm_eps)


class Qwen3LM(nn.Module):
    """`Qwen3ForCausalLM`'s parameters and forward (default RoPE, SwiGLU, q/k norms, tied or untied
    head). `forward(input_ids, attention_mask=None)` returns `LMOutput(logits [B, T, V])`.

    `matmul_dtype = torch.bfloat16` runs the decoder layers' projections in bf16 (autocast: float32
    weights and residual stream, bf16 matmul inputs, float32 accumulation), as the papers' GPU runs
    train; embedding, norms, attention and the LM head stay float32 (`rl.precision`)."""

    matmul_dtype: torch.dtype | None = None

    def __init__(self, config: dict):
        super().__init__()
        c = self.config = _Config(config)
        rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
        problems = [f"model_type {c.get('model_type')!r}" if c.get("model_type") != "qwen3" else None,
                    f"rope_type {rope.get('rope_type')!r}" if rope.get("rope_type", "default") != "default" else None,
                    f"hidden_act {c.get('hidden_act')!r}" if c.get("hidden_act", "silu") != "silu" else None,
                    "sliding window" if c.get("use_sliding_window") else None]
        problems = [p for p in problems if p]
        if problems:
            raise ValueError(f"Qwen3LM implements transformers' default Qwen3, not {', '.join(problems)}; "
                             "load this checkpoint with transformers")
        self.model = _Model(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.get("tie_word_embeddings"):
            self.lm_head.weight = self.model.embed_tokens.weight
        hd = c.get("head_dim") or c.hidden_size // c.num_attention_heads
        theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @classmethod
    def from_module(cls, model) -> "Qwen3LM":
        """The same weights as a transformers `Qwen3ForCausalLM` (a copy), e.g. its initialisation."""
        ours = cls(model.config.to_dict())
        ours.load_state_dict(model.state_dict(), strict=False)
        gen = getattr(model, "generation_config", None)
        if gen is not None:
            ours.generation_config = gen.to_dict()
        return ours

    def compile_layers(self) -> None:
        """Each decoder layer through `torch.compile` (inductor's fused C++ kernels for the norms,
        RoPE and SwiGLU around the matmuls; shapes dynamic, so one graph serves every batch)."""
        for layer in self.model.layers:
            layer.forward = torch.compile(layer.forward, dynamic=True)
            layer.forward_shared = torch.compile(layer.forward_shared, dynamic=True)

    def forward(self, input_ids, attention_mask=None):
        return LMOutput(self.lm_head(self.hidden(input_ids, attention_mask)))

    def hidden(self, input_ids, attention_mask=None):
        """The final (normed) hidden states [B, T, d], what the LM head reads; V0's policy embedder."""
        if attention_mask is not None:
            # right padding only: every row's mask is ones, then zeros
            m = attention_mask.to(torch.bool)
            if bool((m[:, 1:] & ~m[:, :-1]).any()):
                raise ValueError("Qwen3LM takes right-padded batches (pad tokens after a row's tokens)")
        B, T = input_ids.shape
        freqs = torch.arange(T, dtype=torch.float32)[:, None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        x = self.model.embed_tokens(input_ids)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        with torch.autocast("cpu", dtype=self.matmul_dtype or torch.bfloat16, enabled=self.matmul_dtype is not None):
            for layer in self.model.layers:
                x = layer(x, cos, sin)
        return self.model.norm(x)

    def hidden_shared(self, prompt_ids, prompt_lens, resp_ids, row_prompt):
        """The final hidden states that predict each response token, [R, 1 + Lr, d], with each
        prompt computed once: unique prompts `prompt_ids` [U, Lp] (right-padded, lengths
        `prompt_lens` [U]), responses `resp_ids` [R, Lr] (right-padded) continuing prompt
        `row_prompt` [R]. Position 0 is the prompt's last token, position t the response's token
        t - 1: what `hidden` gives at those positions of the rows written out in full (to float
        rounding; tests/engines/local/test_precision.py), for a group's G rows at one prompt's cost."""
        U, Lp = prompt_ids.shape
        R, Lr = resp_ids.shape
        plen = prompt_lens[row_prompt]
        # RoPE at each row's own positions: the response starts where its prompt ends
        fp = torch.arange(Lp, dtype=torch.float32)[:, None] * self.inv_freq
        fr = (plen[:, None] + torch.arange(Lr))[..., None].float() * self.inv_freq
        ep, er = torch.cat((fp, fp), dim=-1), torch.cat((fr, fr), dim=-1)
        x = self.model.embed_tokens(torch.cat((prompt_ids.reshape(-1), resp_ids.reshape(-1))))
        # one RoPE row per token, prompts' then responses' ([N, 1, hd], broadcast over heads)
        e = torch.cat((ep.expand(U, Lp, -1).reshape(U * Lp, -1), er.reshape(R * Lr, -1)))[:, None]
        cos, sin = e.cos().to(x.dtype), e.sin().to(x.dtype)
        mask = torch.cat(((torch.arange(Lp)[None] < plen[:, None])[:, None].expand(R, Lr, Lp),
                          torch.ones(Lr, Lr, dtype=torch.bool).tril().expand(R, Lr, Lr)), -1)[:, None]
        with torch.autocast("cpu", dtype=self.matmul_dtype or torch.bfloat16, enabled=self.matmul_dtype is not None):
            for layer in self.model.layers:
                x = layer.forward_shared(x, cos, sin, U, Lp, row_prompt, mask)
        x = self.model.norm(x)
        last = x[:U * Lp].view(U, Lp, -1)[row_prompt, plen - 1]
        return torch.cat((last[:, None], x[U * Lp:].view(R, Lr, -1)), 1)

    # files ---------------------------------------------------------------------------------
    @classmethod
    def from_dir(cls, path) -> "Qwen3LM":
        from sparserl.core.weights import check_shapes, read_safetensors
        path = Path(path)
        files = sorted(path.glob("*.safetensors"))
        if not (path / "config.json").is_file() or not files:
            raise FileNotFoundError(f"{path}: not a safetensors checkpoint (config.json and *.safetensors)")
        model = cls(json.loads((path / "config.json").read_text()))
        # a truncated or foreign file: one error naming it and how to rebuild the folder
        state = read_safetensors(path)
        check_shapes(path, {k: v.shape for k, v in state.items()},
                     {k: v.shape for k, v in model.state_dict().items()},
                     optional={"lm_head.weight"} if model.config.get("tie_word_embeddings") else ())
        model.load_state_dict(state, strict=False)
        model.source = path
        return model

    def save_pretrained(self, out) -> None:
        """config.json and model.safetensors as transformers writes them (a tied head is not
        stored), plus generation_config.json (the source checkpoint's, or the one it was built
        with). Every file goes through the atomic writer: safetensors' own `save_file` makes the
        weights 0600, which the group could not read."""
        from safetensors.torch import save
        from sparserl.core.artifacts import atomic_write_bytes, atomic_write_text
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if self.config.get("tie_word_embeddings"):
            state.pop("lm_head.weight", None)
        atomic_write_bytes(out / "model.safetensors", save(state, metadata={"format": "pt"}))
        config = self.config.to_dict()
        # as transformers' save_pretrained: without them vLLM resolves the checkpoint to the
        # pooling `Qwen3Model` and refuses to generate, and its dtype "auto" has nothing to read
        config["architectures"] = config.get("architectures") or ["Qwen3ForCausalLM"]
        config["dtype"] = config.get("dtype") or str(next(self.parameters()).dtype).removeprefix("torch.")
        atomic_write_text(out / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
        src = getattr(self, "source", None)
        if src is not None and (Path(src) / "generation_config.json").is_file():
            atomic_write_bytes(out / "generation_config.json", (Path(src) / "generation_config.json").read_bytes())
        elif getattr(self, "generation_config", None):
            atomic_write_text(out / "generation_config.json",
                              json.dumps(self.generation_config, indent=2, sort_keys=True) + "\n")

