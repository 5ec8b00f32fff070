"""V0 as the live prior of the OpenRLHF engine: one Ray actor holds the embedder and the adapter.

OpenRLHF's trainer processes (the experience maker and the OSLA samples generator, which may live
in different Ray workers) query the prior each step. A V0 per process would load the embedder
(Qwen3-Embedding-0.6B at paper scale) and embed the pool once per process; instead one named
actor, `V0PriorServer`, is created by the first process that asks (`get_if_exists`), embeds the
pool once, caches the adapter features per prompt, and answers `predict(prompt_ids, context)`.
`RemoteV0Prior` is the client: a `values.priors.Prior` whose call is one actor round trip, wrapped
in each process's `LivePrior` (its own support buffer, as for every live prior).

The launcher passes what the actor needs as flags: the run's files (its `RunInputs`):
``--sparserl.v0_model`` (the trained V0), ``--sparserl.v0_pool`` and ``--sparserl.v0_embeddings``
(the pool and V0's embeddings of it, made there when missing); ``--sparserl.config`` (the resolved
config files, JSON list: the pool's texts and `v0.embedder`), and the actor's settings
(``rl.openrlhf.v0_*``, defaults in the config schema): ``--sparserl.v0_gpus`` (its share of one
GPU in the last bundle of OpenRLHF's colocated placement group, `placement.colocated_plan`; Ray's
GPUs are logical under the CPU profile, so the same share is asked there),
``--sparserl.v0_threads`` (CPU threads; Ray's default is 1),
``--sparserl.v0_timeout_s`` per query and ``--sparserl.v0_start_timeout_s`` for placement and the
pool's embedding: a missed one stops the run with one line naming the actor and the setting.
The actor logs one ``[v0-prior]`` line per query (prompts, context size, p's range) to the run's log.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ACTOR_NAME = "sparserl_v0_prior"


class V0PriorServer:
    """The actor's body (`ray.remote(V0PriorServer)`), also usable in-process (tests)."""

    def __init__(self, model_path: str, config_paths: Sequence[str] | None = None,
                 embeddings: str | None = None, threads: int | None = None, pool: str | None = None):
        if threads:  # Ray starts actors with OMP_NUM_THREADS=1; torch keeps its own count
            import torch
            torch.set_num_threads(int(threads))
        from sparserl.values.v0.model import load_v0
        from sparserl.values.v0.prior import V0Prior, make_v0_prior
        if config_paths:  # the run's: its config, pool and V0's embeddings of it (its RunInputs)
            from sparserl.core.config import load_config
            if pool is None or embeddings is None:
                raise ValueError("V0PriorServer with the run's config needs its pool and V0's embeddings of it "
                                 "(--sparserl.v0_pool, --sparserl.v0_embeddings: the run's RunInputs)")
            self.prior = make_v0_prior({"kind": "v0", "model": model_path}, 0, load_config(list(config_paths)),
                                       pool=Path(pool), embeddings=Path(embeddings))
        elif embeddings is not None:  # a prebuilt EmbeddingTable of the pool (tests, or a cache)
            from sparserl.values.v0.embedder import EmbeddingTable
            from sparserl.values.v0.settings import v0_device
            # v0.device auto, as the config path: the GPU share Ray gave the actor, else the CPU
            self.prior = V0Prior(load_v0(model_path, device=v0_device({})), EmbeddingTable.load(embeddings))
        else:
            raise ValueError("V0PriorServer needs the run's config files (--sparserl.config) to embed the pool, "
                             "or a prebuilt embeddings table")
        self.calls = 0
        import torch
        print(f"[v0-prior] serving {self.prior!r} on {self.prior.model.device} from {model_path} "
              f"(pid {os.getpid()}, {torch.get_num_threads()} threads)", file=sys.stderr, flush=True)

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

    def where(self) -> dict:
        """Device, threads and what Ray gave the actor (GPU ids, placement group)."""
        import torch
        out = {**self.stats(), "threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
        try:
            import ray
            if ray.is_initialized():
                ctx = ray.get_runtime_context()
                out.update(gpu_ids=[str(g) for g in ray.get_gpu_ids()], node_id=ctx.get_node_id(),
                           placement_group=ctx.get_placement_group_id())
        except ImportError:
            pass
        return out

    def describe(self) -> str:
        return repr(self.prior)


class RemoteV0Prior:
    """prior(prompt_ids, context) answered by the V0PriorServer actor, each call within a timeout."""

    def __init__(self, handle, timeout_s: float | None = None, start_timeout_s: float | None = None,
                 where: str = ""):
        from sparserl.core.config import v0_actor_settings
        d = v0_actor_settings({})
        self.handle = handle
        self.timeout_s = float(timeout_s or d["v0_timeout_s"])
        self.start_timeout_s = float(start_timeout_s or d["v0_start_timeout_s"])
        self.where = where
        self._started = False

    def _get(self, ref, timeout: float, setting: str, what: str):
        import ray
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"V0 prior actor {ACTOR_NAME}{self.where}: {what} took over {timeout:g} s (rl.openrlhf.{setting}); "
                "`ray status` shows whether it is pending: then lower rl.openrlhf.v0_gpus, else see the run "
                f"log's [v0-prior] lines and raise rl.openrlhf.{setting}") from None

    def __call__(self, prompt_ids: Sequence[Any], context: Any = None) -> np.ndarray:
        if not self._started:  # placement and the pool's embedding come before the first answer
            self._get(self.handle.describe.remote(), self.start_timeout_s, "v0_start_timeout_s",
                      "placement and start-up")
            self._started = True
        ctx = [(str(u), float(r)) for u, r in (context or [])]
        p = self._get(self.handle.predict.remote([str(u) for u in prompt_ids], ctx), self.timeout_s,
                      "v0_timeout_s", "one predict call")
        return np.asarray(p, dtype=np.float64)

    def __repr__(self) -> str:
        return f"RemoteV0Prior({ACTOR_NAME})"


def v0_server(model_path: str, config_paths: Sequence[str] | None = None, *, share=None, threads: int = 1,
              embeddings: str | None = None, pool: str | None = None, namespace: str | None = None, group=None):
    """The run's V0PriorServer actor: created by the first caller, found by every other.

    `share` (`placement.Share`) is V0's request in the run's plan: its bundle of the colocated
    placement group (`group`, default the run's named one) and its GPU / CPU shares; None: a
    CPU-only actor outside any group (tests)."""
    import ray
    threads = int(threads)
    opts = dict(name=ACTOR_NAME, get_if_exists=True, lifetime="detached" if namespace else None,
                namespace=namespace, num_gpus=0.0, num_cpus=1,
                # set before torch loads: OpenMP and MKL size their pools from these at import
                runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}})
    if share is not None:
        opts.update(num_gpus=share.gpus, num_cpus=share.cpus)
        if share.bundle is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
            from sparserl.engines.openrlhf.placement import colocated_group
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=group if group is not None else colocated_group(),
                placement_group_bundle_index=share.bundle)
    return ray.remote(V0PriorServer).options(**opts).remote(model_path, list(config_paths or []), embeddings, threads,
                                                              pool)


def remote_prior_from_args(args) -> RemoteV0Prior:
    """The client for OpenRLHF's parsed args (`--sparserl.v0_model`, `--sparserl.config`, the
    ``--sparserl.v0_*`` actor settings); V0's share comes from the run's placement plan."""
    from sparserl.engines.openrlhf.placement import plan_from_args
    sp = getattr(args, "sparserl", None)
    model = getattr(sp, "v0_model", None)
    if not model:
        raise ValueError("prior kind 'v0' in the OpenRLHF engine needs --sparserl.v0_model (the launcher "
                         "sets it from Paths.v0_prior_model; train V0 first: rule v0_table)")
    configs = json.loads(getattr(sp, "config", None) or "[]")
    share = plan_from_args(args).v0
    handle = v0_server(model, configs, share=share, threads=int(sp.v0_threads),
                       embeddings=getattr(sp, "v0_embeddings", None), pool=getattr(sp, "v0_pool", None))
    where = f" (bundle {share.bundle}, {share.gpus:g} GPU)" if share and share.bundle is not None else ""
    return RemoteV0Prior(handle, sp.v0_timeout_s, sp.v0_start_timeout_s, where)
