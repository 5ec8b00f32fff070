"""V0 as the live prior of the OpenRLHF engine: one Ray actor holds the embedder and the adapter.

OpenRLHF's trainer processes (the experience maker and the OSLA samples generator, which may live
in different Ray workers) query the prior each step. A V0 per process would load the embedder
(Qwen3-Embedding-0.6B at paper scale) and embed the pool once per process; instead one named
actor, `V0PriorServer`, is created by the first process that asks (`get_if_exists`), embeds the
pool once, caches the adapter features per prompt, and answers `predict(prompt_ids, context)`.
`RemoteV0Prior` is the client: a `values.priors.Prior` whose call is one actor round trip, wrapped
in each process's `LivePrior` (its own support buffer, as for every live prior).

The launcher passes what the actor needs as flags: ``--sparserl.v0_model`` (the trained V0,
`Paths.v0_prior_model`), ``--sparserl.config`` (the resolved config files, JSON list: the pool's
texts and `v0.embedder`) and ``--sparserl.v0_gpus`` (GPUs of the actor; 0 without CUDA, `actor_gpus`).
The actor logs one ``[v0-prior]`` line per query (prompts, context size, p's range) to the run's log.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Sequence

import numpy as np

ACTOR_NAME = "sparserl_v0_prior"


class V0PriorServer:
    """The actor's body (`ray.remote(V0PriorServer)`), also usable in-process (tests)."""

    def __init__(self, model_path: str, config_paths: Sequence[str] | None = None,
                 embeddings: str | None = None):
        from sparserl.values.v0.model import load_v0
        from sparserl.values.v0.prior import V0Prior, make_v0_prior
        if embeddings is not None:  # a prebuilt EmbeddingTable of the pool (tests, or a cache)
            from sparserl.values.v0.embedder import EmbeddingTable
            self.prior = V0Prior(load_v0(model_path), EmbeddingTable.load(embeddings))
        else:
            from sparserl.core.config import load_config
            if not config_paths:
                raise ValueError("V0PriorServer needs the run's config files (--sparserl.config) to embed the pool")
            self.prior = make_v0_prior({"kind": "v0", "model": model_path}, 0, load_config(list(config_paths)))
        self.calls = 0
        print(f"[v0-prior] serving {self.prior!r} on {self.prior.model.device} from {model_path} "
              f"(pid {os.getpid()})", file=sys.stderr, flush=True)

    def predict(self, prompt_ids: list, context: list) -> list:
        p = self.prior(prompt_ids, [tuple(c) for c in context])
        self.calls += 1
        # one line per query: the run's log then shows that V0 answered, with what context
        ctx = f"context {len(context)} (mean reward {np.mean([r for _, r in context]):.3f})" if context \
            else "empty context (0.5 for all)"
        stats = f"p min/mean/max {p.min():.3f}/{p.mean():.3f}/{p.max():.3f}" if len(p) else "no prompts"
        print(f"[v0-prior] call {self.calls}: {len(prompt_ids)} prompts, {ctx}, {stats}", file=sys.stderr, flush=True)
        return p.tolist()

    def stats(self) -> dict:
        return {"calls": self.calls, "device": str(self.prior.model.device)}

    def describe(self) -> str:
        return repr(self.prior)


class RemoteV0Prior:
    """prior(prompt_ids, context) answered by the V0PriorServer actor."""

    def __init__(self, handle):
        self.handle = handle

    def __call__(self, prompt_ids: Sequence[Any], context: Any = None) -> np.ndarray:
        import ray
        ctx = [(str(u), float(r)) for u, r in (context or [])]
        return np.asarray(ray.get(self.handle.predict.remote([str(u) for u in prompt_ids], ctx)), dtype=np.float64)

    def __repr__(self) -> str:
        return f"RemoteV0Prior({ACTOR_NAME})"


def actor_gpus(gpus: float) -> float:
    """GPUs the actor asks Ray for: `gpus`, or 0 under the CPU profile (`cpu_shims.ENV_FLAG`, set
    in every process of a run whose driver found no CUDA GPU). There Ray's GPUs are logical, one
    per bundle of OpenRLHF's placement groups (`launcher.logical_gpus`), so an actor asking for one
    more would wait forever; and V0 would run on the CPU anyway (v0.device auto)."""
    from sparserl.engines.openrlhf.cpu_shims import ENV_FLAG
    gpus = float(gpus or 0.0)
    if gpus > 0 and os.environ.get(ENV_FLAG) == "1":
        print(f"[v0-prior] no CUDA GPU (CPU profile): the V0 actor asks Ray for 0 GPUs, not "
              f"{gpus:g} (--sparserl.v0_gpus)", file=sys.stderr, flush=True)
        return 0.0
    return gpus


def v0_server(model_path: str, config_paths: Sequence[str] | None = None, *, gpus: float = 0.0,
              embeddings: str | None = None, namespace: str | None = None):
    """The run's V0PriorServer actor: created by the first caller, found by every other."""
    import ray
    actor = ray.remote(V0PriorServer)
    return actor.options(name=ACTOR_NAME, get_if_exists=True, lifetime="detached" if namespace else None,
                         namespace=namespace, num_gpus=actor_gpus(gpus), num_cpus=1).remote(
        model_path, list(config_paths or []), embeddings)


def remote_prior_from_args(args) -> RemoteV0Prior:
    """The client for OpenRLHF's parsed args (`--sparserl.v0_model`, `--sparserl.config`)."""
    sp = getattr(args, "sparserl", None)
    model = getattr(sp, "v0_model", None)
    if not model:
        raise ValueError("prior kind 'v0' in the OpenRLHF engine needs --sparserl.v0_model (the launcher "
                         "sets it from Paths.v0_prior_model; train V0 first: rule v0_table)")
    configs = json.loads(getattr(sp, "config", None) or "[]")
    return RemoteV0Prior(v0_server(model, configs, gpus=float(getattr(sp, "v0_gpus", 0) or 0),
                                   embeddings=getattr(sp, "v0_embeddings", None)))
