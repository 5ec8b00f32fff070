"""The dataset label: the one per-prompt channel OpenRLHF 0.11.2 carries from the dataloader
through vLLM, the reward function and the experience maker to the critic (module doc of
`experience`: how side data travels). JSON with uid, answer and the static side data; the run's
method spec from ``--sparserl.spec``. Nothing here imports OpenRLHF: the launcher's dataset, the
env side loaded by path and the Ray workers' classes all read labels through this module."""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from sparserl.methods.spec import MethodSpec

LABEL_FIELDS = ("uid", "answer", "phat", "prior")


def encode_label(uid: Any, answer: Any, **side: Any) -> str:
    """The dataset label of one prompt: JSON with uid, answer and optional side data (phat, prior,
    task metadata). None values are dropped."""
    d = {"uid": str(uid), "answer": None if answer is None else str(answer)}
    d.update({k: (float(v) if isinstance(v, (np.floating, np.integer)) else v)
              for k, v in side.items() if v is not None})
    return json.dumps(d, sort_keys=True)


def decode_label(label: Any) -> dict:
    """Inverse of `encode_label`; a non-JSON label (plain answer) gives {"answer": label}."""
    if isinstance(label, dict):
        return label
    if isinstance(label, (bytes, bytearray)):
        label = label.decode()
    if isinstance(label, str) and label.startswith("{"):
        try:
            d = json.loads(label)
        except json.JSONDecodeError:
            d = None
        if isinstance(d, dict):
            return d
    return {"answer": label}


def experience_uids(experiences: Sequence) -> list[str]:
    """One uid per rollout, in concatenation order: the label's uid, else the prompt text."""
    out = []
    for e in experiences:
        n = len(e.rewards) if e.rewards is not None else len(e.labels)
        labels = list(e.labels) if e.labels else [None] * n
        prompts = list(e.prompts) if e.prompts else [None] * n
        if len(labels) != n or len(prompts) != n:
            raise ValueError(f"experience has {n} rewards but {len(labels)} labels / {len(prompts)} prompts")
        for lab, prm in zip(labels, prompts):
            uid = decode_label(lab).get("uid") if lab is not None else None
            if uid is None:
                if prm is None:
                    raise ValueError("a rollout has neither a JSON label with 'uid' nor a prompt to group by")
                uid = "prompt:" + str(prm)
            out.append(str(uid))
    return out


def method_spec(args) -> MethodSpec | None:
    """The method spec the launcher put in ``--sparserl.spec`` (JSON), or None when absent. Keys a
    hand-written spec leaves out come from OpenRLHF's own flags (estimator, n_samples_per_prompt)
    and the spec defaults (`sparserl.methods.spec`)."""
    ns = getattr(args, "sparserl", None)
    raw = getattr(ns, "spec", None) if ns is not None else None
    if not raw:
        return None
    d = json.loads(raw) if isinstance(raw, str) else dict(raw)
    d.setdefault("name", getattr(ns, "method", None) or "openrlhf")
    d.setdefault("estimator", args.algo.advantage.estimator)
    d.setdefault("group_size", int(getattr(args.rollout, "n_samples_per_prompt", 1) or 1))
    d.setdefault("loss", {"type": "ppo_clip"})
    return MethodSpec.from_dict(d)


__all__ = ["LABEL_FIELDS", "decode_label", "encode_label", "experience_uids", "method_spec"]
