"""V0's settings: `v0:` in a config over its defaults in the schema (core/config.schema.yaml).

Defaults are the paper's (V0 §4.1): 168 static queries x 6 numbers, 3 heads, AdamW 2e-4, context
256, query batch 8, batch 2, alpha 0.25. The tiny-scale head is the offline GP (`gp`); the paper's
is TabPFN-v2.5 (`tabpfn`, `head.model_path`). The embedder is MiniLM from its PyPI package at
tiny scale, Qwen3-Embedding-0.6B from `embedder.path` at paper scale. `device` places the
embedder and V0 (`v0_device`); token-state tables stay in host memory.
"""
from __future__ import annotations

from sparserl.core.config import schema_defaults, section_setting

# the v0 keys a settings dict holds (baselines and harvest have their own readers)
SECTIONS = ("embedder", "adapter", "head", "train", "official_sample", "device")
DEVICES = "auto, cpu, cuda or cuda:<index>"


def v0_settings(cfg: dict | None = None, **overrides) -> dict:
    """The schema's v0 defaults (SECTIONS) merged with cfg['v0'], then with `overrides`
    ({section: {key: value}})."""
    defaults = schema_defaults("v0")
    out = {k: defaults[k] for k in SECTIONS}
    for layer in ((cfg or {}).get("v0") or {}, overrides):
        for k, v in layer.items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k].update(v)
            else:
                out[k] = v
    return out


def v0_device(s: dict):
    """`v0.device` as a torch.device: 'auto' is the first CUDA device when CUDA is available,
    else the CPU; 'cuda' / 'cuda:N' must exist (a job without a GPU fails at once, not hours in)."""
    import re
    import torch
    from sparserl.core.config import ConfigError
    d = section_setting(s, "v0", "device")
    if not isinstance(d, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", d):
        raise ConfigError(f"v0.device is {d!r}; use {DEVICES}")
    if d == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(d)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"v0.device is {d!r} but torch sees no CUDA device here; run the job on "
                              "a GPU node (the rule's `gpu` resource) or set v0.device: auto / cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"v0.device is {d!r} but torch sees {torch.cuda.device_count()} CUDA "
                              "device(s); use cuda or a smaller index")
    return dev


def make_embedder(s: dict, policy_dir=None):
    """The embedder `s['embedder']` names ('minilm', 'hf' + path, 'policy' + a policy directory)."""
    from sparserl.values.v0.embedder import HFEmbedder, PolicyEmbedder, minilm_path
    e, dev = s["embedder"], v0_device(s)
    if e["kind"] == "minilm":
        return HFEmbedder(minilm_path(), max_length=e["max_length"], name="all-MiniLM-L6-v2", device=dev)
    if e["kind"] == "hf":
        if not e.get("path"):
            raise ValueError("v0.embedder.kind 'hf' needs v0.embedder.path (a local model directory, "
                             "e.g. Qwen3-Embedding-0.6B)")
        return HFEmbedder(e["path"], max_length=e["max_length"], device=dev)
    if e["kind"] == "policy":
        if policy_dir is None:
            raise ValueError("v0.embedder.kind 'policy' needs a policy checkpoint (v0.embedder.path: a policy ref)")
        return PolicyEmbedder(policy_dir, device=dev)
    raise ValueError(f"v0.embedder.kind must be minilm, hf or policy, got {e['kind']!r}")
