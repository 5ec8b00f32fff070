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
texts and `v0.embedder`) and ``--sparserl.v0_gpus`` (GPUs of the actor, 0 on CPU).
"""
from __future__ import annotations

import json
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

    def predict(self, prompt_ids: list, context: list) -> list:
        return self.prior(prompt_ids, [tuple(c) for c in context]).tolist()

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


def v0_server(model_path: str, config_paths: Sequence[str] | None = None, *, gpus: float = 0.0,
              embeddings: str | None = None, namespace: str | None = None):
    """The run's V0PriorServer actor: created by the first caller, found by every other."""
    import ray
    actor = ray.remote(V0PriorServer)
    return actor.options(name=ACTOR_NAME, get_if_exists=True, lifetime="detached" if namespace else None,
                         namespace=namespace, num_gpus=gpus, num_cpus=1).remote(
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
