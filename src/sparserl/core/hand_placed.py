"""Files a user places by hand at paper scale: their config key, where they go and how to get
them. Workflow rules take them as inputs (workflow/rules/models.smk), so a dry run lists each
missing one as a `hand_placed_file` job whose message says what to do, and a run fails there,
at once, instead of a job failing hours in."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HandPlaced:
    key: str
    path: Path
    how: str


def _get(cfg: dict, key: str):
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def hand_placed_files(cfg: dict, keys=None, *, fetched=()) -> list[HandPlaced]:
    """The hand-placed files the config names (all, or those of `keys`); a path in `fetched` (a
    fetch_models output) is not hand-placed."""
    out = []
    v0 = cfg.get("v0") or {}
    emb = v0.get("embedder") or {}
    if emb.get("kind") == "hf" and emb.get("path"):
        out.append(HandPlaced("v0.embedder.path", Path(emb["path"]),
                              f"huggingface-cli download Qwen/Qwen3-Embedding-0.6B --local-dir {emb['path']} "
                              "(or list it under models.hub so fetch_models downloads it)"))
    head = v0.get("head") or {}
    if head.get("kind") == "tabpfn" and head.get("model_path"):
        out.append(HandPlaced("v0.head.model_path", Path(head["model_path"]),
                              "the TabPFN-v2.5 classifier checkpoint (Prior Labs' licence: accept it on "
                              f"huggingface.co/Prior-Labs, download the .ckpt) to {head['model_path']}"))
    envs = (cfg.get("critique") or {}).get("envs") or {}
    for name, env in envs.items():
        if env.get("kind") != "minif2f":
            continue
        if env.get("data"):
            out.append(HandPlaced(f"critique.envs.{name}.data", Path(env["data"]),
                                  "a MiniF2F JSONL (name, split, formal_statement, header), e.g. "
                                  f"DeepSeek-Prover's minif2f.jsonl, at {env['data']}"))
        if env.get("project_dir"):
            out.append(HandPlaced(f"critique.envs.{name}.project_dir", Path(env["project_dir"]) / "lake-manifest.json",
                                  "leanprover-community/repl with Mathlib, built (`lake build`) in "
                                  f"{env['project_dir']} (README: Lean)"))
    fetched = {str(f) for f in fetched}
    out = [h for h in out if str(h.path) not in fetched]
    if keys is not None:
        want = set(keys)
        out = [h for h in out if h.key in want or h.key.rsplit(".", 1)[0] in want]
    return out


__all__ = ["HandPlaced", "hand_placed_files"]
