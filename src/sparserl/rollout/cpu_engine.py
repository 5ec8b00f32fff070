"""A rollout engine for many short sequences from tiny decoder-only models on CPU.

The same Qwen/Llama decoder as transformers, written out for this one workload (`rollout.backend:
cpu`). What it does differently from a batched `model.generate`, each measured on its own in
`perf/rollout_throughput.py --ablate`:

- prompt de-duplication: n rollouts of a prompt share one prefill, whose KV rows are copied to the
  n rows that continue it (a group of 16 pays for its ~20 prompt tokens once, not 16 times);
- a preallocated KV cache written in place, one tensor for all layers, instead of concatenation;
- logits at the last position only, and one log-softmax per step, reused for sampling;
- finished rows leave the batch: the cache is compacted once a quarter of its rows are done;
- `torch.inference_mode`, fused QKV and gate/up projections.

Exactness: `logprobs[m][t]` is the log-softmax of the tempered logits at the chosen token, as a
plain forward pass of the same model gives it (tests compare the two), with no top-k and top-p
applied only to the sampling support. Sampling inverts the CDF of that distribution with one
uniform per row and step (a Gumbel-max draw needs one per token, and drawing those cost a fifth of
the engine's time). The uniform of every row in a chunk is drawn at every step, finished rows
included, so the sample of a row does not depend on when the others finish: de-duplication and
dropping finished rows change the arithmetic, not the draws.

Determinism: the rows are cut into chunks of at most `batch_size` rows in an order fixed by the
prompt lengths, each chunk with its own generator seeded from (`seed`, chunk). Same seed, inputs,
batch size and thread count give the same bytes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from sparserl.rollout.base import RolloutBackend, RolloutBatch, SamplingParams, expand_n

SUPPORTED = ("qwen3", "qwen2", "llama")


@dataclass
class _Layer:
    ln1: torch.Tensor
    wqkv: torch.Tensor
    bqkv: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    wo: torch.Tensor
    bo: torch.Tensor | None
    ln2: torch.Tensor
    wgu: torch.Tensor
    wdown: torch.Tensor


def _expected_shapes(c: dict) -> tuple[dict[str, tuple], set[str]]:
    """The shapes of the weights `_Decoder` reads, by the config, and those that may be missing
    (a tied head; biases, which Qwen2 has; q/k norms outside Qwen3)."""
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh = c["num_attention_heads"]
    kvh = c.get("num_key_value_heads") or nh
    hd = c.get("head_dim") or H // nh
    inter = c["intermediate_size"]
    out = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
    optional = {"lm_head.weight"} if c.get("tie_word_embeddings") else set()
    for i in range(L):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        out.update({f"model.layers.{i}.input_layernorm.weight": (H,),
                    f"model.layers.{i}.post_attention_layernorm.weight": (H,),
                    a + "q_proj.weight": (nh * hd, H), a + "k_proj.weight": (kvh * hd, H),
                    a + "v_proj.weight": (kvh * hd, H), a + "o_proj.weight": (H, nh * hd),
                    m + "gate_proj.weight": (inter, H), m + "up_proj.weight": (inter, H),
                    m + "down_proj.weight": (H, inter)})
        extra = {a + "q_proj.bias": (nh * hd,), a + "k_proj.bias": (kvh * hd,),
                 a + "v_proj.bias": (kvh * hd,), a + "o_proj.bias": (H,)}
        norms = {a + "q_norm.weight": (hd,), a + "k_norm.weight": (hd,)}
        out.update(extra)
        out.update(norms)
        optional |= set(extra) | (set() if c.get("model_type") == "qwen3" else set(norms))
    return out, optional


class _Decoder:
    """The weights of a Qwen/Llama causal LM under their transformers names, fused for inference,
    and its forward pass. Built from a checkpoint's config dict and weights, either read from its
    files (`from_dir`, no transformers import: a rollout job pays for torch alone) or taken from a
    live module (`from_module`, sharing its storage, so a weight update shows at once)."""

    def __init__(self, config: dict, w: dict[str, torch.Tensor]):
        c = config
        if c.get("model_type") not in SUPPORTED:
            raise ValueError(f"rollout.backend 'cpu' runs {', '.join(SUPPORTED)} decoders, not "
                             f"{c.get('model_type')!r}; set rollout.backend: hf for other architectures")
        rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"rollout.backend 'cpu' implements default RoPE, not "
                             f"{rope.get('rope_type')!r}; set rollout.backend: hf")
        if c.get("hidden_act", "silu") != "silu":
            raise ValueError(f"rollout.backend 'cpu' implements SwiGLU (silu), not {c['hidden_act']!r}")
        self.nh = c["num_attention_heads"]
        self.kvh = c.get("num_key_value_heads") or self.nh
        self.hd = c.get("head_dim") or c["hidden_size"] // self.nh
        self.eps = c["rms_norm_eps"]
        theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        # transformers' default RoPE frequencies, computed the same way (attention_scaling 1)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.hd, 2, dtype=torch.int64).float() / self.hd))
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed) if c.get("tie_word_embeddings") \
            else w["lm_head.weight"]
        self.layers = []
        for i in range(c["num_hidden_layers"]):
            a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            qkv = [a + f"{x}_proj." for x in "qkv"]
            bias = torch.cat([w[p + "bias"] for p in qkv]) if qkv[0] + "bias" in w else None
            self.layers.append(_Layer(
                ln1=w[f"model.layers.{i}.input_layernorm.weight"],
                wqkv=torch.cat([w[p + "weight"] for p in qkv]), bqkv=bias,
                q_norm=w.get(a + "q_norm.weight"), k_norm=w.get(a + "k_norm.weight"),
                wo=w[a + "o_proj.weight"], bo=w.get(a + "o_proj.bias"),
                ln2=w[f"model.layers.{i}.post_attention_layernorm.weight"],
                wgu=torch.cat([w[m + "gate_proj.weight"], w[m + "up_proj.weight"]]),
                wdown=w[m + "down_proj.weight"]))
        self.dtype = self.embed.dtype

    @classmethod
    def from_module(cls, model) -> "_Decoder":
        return cls(model.config.to_dict(), {k: v.detach() for k, v in model.state_dict().items()})

    @classmethod
    def from_dir(cls, path: Path) -> "_Decoder":
        from sparserl.core.weights import check_shapes, read_safetensors
        path = Path(path)
        files = sorted(path.glob("*.safetensors"))
        if not (path / "config.json").is_file() or not files:
            raise FileNotFoundError(f"{path}: not a safetensors checkpoint (config.json and "
                                    "*.safetensors); save it with save_pretrained or use rollout.backend: hf")
        config = json.loads((path / "config.json").read_text())
        # a truncated or foreign file: one error naming it and how to rebuild the folder, not a
        # KeyError here or a shape error mid-generation
        w = read_safetensors(path)
        if config.get("model_type") in SUPPORTED:
            expected, optional = _expected_shapes(config)
            check_shapes(path, {k: v.shape for k, v in w.items()}, expected, optional=optional, extra_ok=True)
        return cls(config, w)

    def _rms(self, x, w):
        # transformers' RMSNorm: normalise in float32, cast back, then scale
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    def rope(self, pos: torch.Tensor):
        freqs = pos.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    @staticmethod
    def _rotate(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def forward(self, ids, cos, sin, cache, slot: int, allowed, last_only: bool):
        """ids [B, T] at cache slots [slot, slot + T); `allowed` [B, T, slot + T] says which keys
        each query sees. Writes K/V into `cache` [layers, 2, B, kvh, S, hd]; returns logits of
        the last position [B, V] (last_only) or hidden states."""
        B, T = ids.shape
        nh, kvh, hd = self.nh, self.kvh, self.hd
        G = nh // kvh
        x = F.embedding(ids, self.embed)
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, hd]
        blocked = ~allowed[:, None, None]      # [B, 1, 1, T, S]
        S = slot + T
        for li, L in enumerate(self.layers):
            h = self._rms(x, L.ln1)
            qkv = F.linear(h, L.wqkv, L.bqkv)
            q, k, v = qkv.split((nh * hd, kvh * hd, kvh * hd), dim=-1)
            q, k = q.view(B, T, nh, hd), k.view(B, T, kvh, hd)
            if L.q_norm is not None:
                q, k = self._rms(q, L.q_norm), self._rms(k, L.k_norm)
            q = self._rotate(q.transpose(1, 2), cos, sin)
            k = self._rotate(k.transpose(1, 2), cos, sin)
            cache[li, 0, :, :, slot:S] = k
            cache[li, 1, :, :, slot:S] = v.view(B, T, kvh, hd).transpose(1, 2)
            keys, vals = cache[li, 0, :, :, :S], cache[li, 1, :, :, :S]
            # grouped-query attention without repeating K/V: [B, kvh, G, T, hd] x [B, kvh, S, hd]
            qg = q.reshape(B, kvh, G * T, hd)
            scores = torch.matmul(qg, keys.transpose(-1, -2)).view(B, kvh, G, T, S) * hd ** -0.5
            w = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
            att = torch.matmul(w.view(B, kvh, G * T, S), vals).view(B, nh, T, hd)
            x = x + F.linear(att.transpose(1, 2).reshape(B, T, nh * hd), L.wo, L.bo)
            h = self._rms(x, L.ln2)
            g, u = F.linear(h, L.wgu).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, L.wdown)
        if last_only:
            x = x[:, -1]
        return F.linear(self._rms(x, self.norm), self.lm_head)


def _top_p_mask(logp: torch.Tensor, top_p: float, k: int = 32) -> torch.Tensor:
    """logp with the tokens outside the top-p nucleus set to -inf (the first always stays).

    The nucleus is read off the top `k` tokens (a partial sort) for every row whose top `k` hold
    at least `top_p` of the mass, which is nearly every row at top-p 0.7; the others take the
    full sort. Both give the same nucleus (up to the order of exactly tied tokens)."""
    V = logp.shape[-1]
    if k >= V:
        return _nucleus(logp, *torch.sort(logp, descending=True, dim=-1), top_p)
    vals, idx = logp.topk(k, dim=-1)
    full = vals.exp().sum(-1) < top_p
    out = _nucleus(torch.full_like(logp, float("-inf")), vals, idx, top_p)
    if bool(full.any()):
        rows = full.nonzero().squeeze(-1)
        sub = logp[rows]
        out[rows] = _nucleus(sub, *torch.sort(sub, descending=True, dim=-1), top_p)
    return out


def _nucleus(base: torch.Tensor, sorted_lp: torch.Tensor, idx: torch.Tensor, top_p: float):
    """`base` with the sorted tokens `idx` set to their log-prob inside the nucleus, -inf outside."""
    probs = sorted_lp.exp()
    drop = (probs.cumsum(-1) - probs) >= top_p
    return base.scatter(-1, idx, sorted_lp.masked_fill(drop, float("-inf")))


def _inverse_cdf(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row from softmax(logp) (-inf entries have probability 0), given u ~ U[0, 1):
    the first token whose cumulative probability exceeds u times the row's total. Float64 sums,
    and the clamp to the last token of positive probability, keep a zero-probability token out
    whatever the rounding."""
    probs = torch.softmax(logp.double(), dim=-1)
    cdf = probs.cumsum(-1)
    tok = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)
    last = probs.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(-1)
    return torch.minimum(tok, last)


def _segments(lengths: Sequence[int], n_arr: np.ndarray, batch_size: int):
    """Chunks of (prompt, rows) with at most batch_size rows each, prompts in length order so a
    chunk's prompts pad little; a prompt with more than batch_size rows spans chunks."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    chunks, cur, used = [], [], 0
    for p in order:
        left = int(n_arr[p])
        while left > 0:
            take = min(left, batch_size - used)
            cur.append((int(p), take))
            used += take
            left -= take
            if used == batch_size:
                chunks.append(cur)
                cur, used = [], 0
    if cur:
        chunks.append(cur)
    return chunks


class _FileTokenizer:
    """What the engine and the tiny prompts need of a transformers fast tokenizer (ids without
    special tokens, decoding without them, EOS and pad ids), read from its files with
    `tokenizers` alone."""

    def __init__(self, path: Path, config: dict):
        from tokenizers import Tokenizer
        self.path = Path(path)
        self._tok = Tokenizer.from_file(str(path / "tokenizer.json"))

        def token_id(key):
            t = config.get(key)
            t = t.get("content") if isinstance(t, dict) else t
            return None if t is None else self._tok.token_to_id(t)
        self.eos_token_id, self.pad_token_id = token_id("eos_token"), token_id("pad_token")

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": self._tok.encode(text, add_special_tokens=add_special_tokens).ids}

    def batch_decode(self, seqs, skip_special_tokens: bool = False) -> list[str]:
        return self._tok.decode_batch([list(map(int, s)) for s in seqs],
                                      skip_special_tokens=skip_special_tokens)

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def save_pretrained(self, out) -> None:
        """The files it was read from, unchanged (a checkpoint saved after RL keeps its tokenizer)."""
        import shutil
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (self.path / name).is_file():
                shutil.copyfile(self.path / name, Path(out) / name)


def load_tokenizer(path: Path):
    """`_FileTokenizer` for a plain fast tokenizer; transformers' AutoTokenizer when the checkpoint
    asks for more (a chat template, space clean-up on decoding, no tokenizer.json)."""
    path = Path(path)
    cfg_file = path / "tokenizer_config.json"
    config = json.loads(cfg_file.read_text()) if cfg_file.is_file() else None
    if config is None or not (path / "tokenizer.json").is_file() or config.get("chat_template") \
            or config.get("clean_up_tokenization_spaces") or (path / "chat_template.jinja").exists():
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(str(path))
    return _FileTokenizer(path, config)


class CPUEngine(RolloutBackend):
    """See the module docstring. `model_or_path`: a checkpoint dir or a live model, whose current
    weights every `generate` call reads (the local trainer passes the model it trains)."""

    def __init__(self, model_or_path, tokenizer=None, batch_size: int = 512,
                 threads: int | None = None, dedup: bool = True, drop_finished: bool = True,
                 compact_at: float = 0.25):
        if threads:
            torch.set_num_threads(int(threads))
        if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
            path = Path(str(model_or_path))
            self.model = None
            self._static = _Decoder.from_dir(path)  # weights read once; nothing trains them
            self.tokenizer = tokenizer or load_tokenizer(path)
        else:
            self.model, self.tokenizer, self._static = model_or_path, tokenizer, None
            self.model.eval()
            _Decoder.from_module(self.model)  # fail at construction on an architecture we do not implement
        if batch_size < 1:
            raise ValueError(f"rollout.batch_size must be >= 1 (got {batch_size})")
        self.batch_size = int(batch_size)
        self.dedup, self.drop_finished, self.compact_at = dedup, drop_finished, compact_at
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.eos_id

    def _chunk(self, dec: _Decoder, seg, prompt_ids, params: SamplingParams, gen):
        """Roll out one chunk: seg = [(prompt, rows)]. Returns per-row token and log-prob tensors
        [R, max_new] and the response lengths."""
        rows_of = [c for _, c in seg]
        R, Tn = sum(rows_of), params.max_new_tokens
        if self.dedup:
            uniq = [prompt_ids[p] for p, _ in seg]
            expand = torch.repeat_interleave(torch.arange(len(seg)), torch.tensor(rows_of))
        else:
            uniq = [prompt_ids[p] for p, c in seg for _ in range(c)]
            expand = torch.arange(R)
        Lp = max(len(r) for r in uniq)
        U = len(uniq)
        ids = torch.full((U, Lp), self.pad_id, dtype=torch.long)
        plen = torch.tensor([len(r) for r in uniq])
        for b, r in enumerate(uniq):
            ids[b, Lp - len(r):] = torch.tensor(r, dtype=torch.long)
        pad = Lp - plen
        slots = torch.arange(Lp)
        pos = (slots[None] - pad[:, None]).clamp(min=0)
        causal = slots[None, :, None] >= slots[None, None, :]
        key_ok = slots[None, None, :] >= pad[:, None, None]
        # a pad query sees itself, so no softmax row is all -inf (NaN K/V would leak into later
        # layers); real queries never see pad keys
        allowed = causal & (key_ok | (slots[None, :, None] == slots[None, None, :]))
        S = Lp + Tn
        shape = (len(dec.layers), 2, R, dec.kvh, S, dec.hd)
        cache = torch.empty(shape, dtype=dec.dtype)
        cos, sin = dec.rope(pos)
        if self.dedup:
            # the prefill's K/V rows copied to the rows that continue them, prompt slots only
            prefix = torch.empty((*shape[:2], U, shape[3], Lp, shape[5]), dtype=dec.dtype)
            logits = dec.forward(ids, cos, sin, prefix, 0, allowed, last_only=True)
            torch.index_select(prefix, 2, expand, out=cache[..., :Lp, :])
            logits = logits.index_select(0, expand)
        else:
            logits = dec.forward(ids, cos, sin, cache, 0, allowed, last_only=True)
        row_pad, row_plen = pad[expand], plen[expand]
        # [rows in cache, S]: pad slots are blocked, generated slots always valid
        valid = torch.arange(S)[None] >= row_pad[:, None]

        out_tok = torch.full((R, Tn), self.pad_id, dtype=torch.long)
        out_lp = torch.zeros((R, Tn), dtype=torch.float32)
        length = torch.full((R,), Tn, dtype=torch.long)
        live = torch.arange(R)  # chunk rows held in the cache, in cache order
        done = torch.zeros(R, dtype=torch.bool)  # indexed by cache position
        temp = 1.0 if params.greedy else params.temperature
        for t in range(Tn):
            z = logits.float()
            u = None if params.greedy else torch.rand(R, generator=gen, dtype=torch.float64)
            logp = torch.log_softmax(z / temp, dim=-1)
            if params.greedy:
                tok = logp.argmax(-1)
            else:
                support = _top_p_mask(logp, params.top_p) if params.top_p < 1.0 else logp
                tok = _inverse_cdf(support, u[live])
            lp = logp.gather(-1, tok[:, None]).squeeze(-1)
            keep = ~done
            out_tok[live[keep], t] = tok[keep]
            out_lp[live[keep], t] = lp[keep]
            ended = keep & (tok == self.eos_id)
            length[live[ended]] = t + 1
            done = done | ended
            if t == Tn - 1 or bool(done.all()):
                break
            if self.drop_finished and float(done.float().mean()) >= self.compact_at:
                k = (~done).nonzero().squeeze(-1)
                # only the Lp + t slots written so far move
                kept = torch.empty((*cache.shape[:2], len(k), *cache.shape[3:]), dtype=cache.dtype)
                torch.index_select(cache[..., :Lp + t, :], 2, k, out=kept[..., :Lp + t, :])
                cache, live, tok, done = kept, live[k], tok[k], done[k]
                valid = valid.index_select(0, k)
            tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
            cos, sin = dec.rope((row_plen[live] + t)[:, None])
            logits = dec.forward(tok[:, None], cos, sin, cache, Lp + t,
                                 valid[:, None, :Lp + t + 1], last_only=True)
        return out_tok, out_lp, length

    def generate(self, prompts: Sequence[str], n, params: SamplingParams, seed: int) -> RolloutBatch:
        n_arr = expand_n(n, len(prompts))
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        index = np.repeat(np.arange(len(prompts)), n_arr)
        first_row = np.concatenate([[0], np.cumsum(n_arr)[:-1]]).astype(np.int64)
        resp: list = [None] * len(index)
        lps: list = [None] * len(index)
        fin: list = [None] * len(index)
        next_row = first_row.copy()
        with torch.inference_mode():
            # a live model: its weights as they are now
            dec = self._static if self.model is None else _Decoder.from_module(self.model)
            for c, seg in enumerate(_segments([len(p) for p in prompt_ids], n_arr, self.batch_size)):
                gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + c)
                tok, lp, length = self._chunk(dec, seg, prompt_ids, params, gen)
                self._rows_done(len(length))
                tok, lp, length = tok.tolist(), lp.numpy(), length.tolist()
                r = 0
                for p, cnt in seg:
                    for _ in range(cnt):
                        m = int(next_row[p]); next_row[p] += 1
                        k = length[r]
                        resp[m] = tok[r][:k]
                        lps[m] = lp[r, :k].copy()
                        fin[m] = "stop" if resp[m] and resp[m][-1] == self.eos_id else "length"
                        r += 1
        # no rollouts at all: batch_decode([]) would return one phantom "" text
        texts = self.tokenizer.batch_decode(
            [[t for t in r if t != self.eos_id] for r in resp], skip_special_tokens=True) if resp else []
        return RolloutBatch(prompts=list(prompts), prompt_ids=prompt_ids, prompt_index=index,
                            response_ids=resp, logprobs=lps, texts=texts, finish_reason=fin)
