"""`OslaSamplesGenerator`: OpenRLHF's `SamplesGenerator` with V0.5's sequential OSLA allocation.

For a method whose spec has ``osla`` (``--sparserl.spec``), `generate_samples` draws
``--rollout.batch_size`` prompts and runs `sparserl.methods.osla_sampler.run_osla` on them, whose
`sample_fn` dispatches each round to the vLLM engines through OpenRLHF's own
`_dispatch_prompts_to_vllm` with ``n_samples_per_prompt`` set per dispatch (round 0: k_init per
prompt; later rounds: min(k_step, k_max - k) for every prompt that still wants more), and turns
the responses into Experiences with OpenRLHF's `_process_response_into_experience`. The stopping
rule, k_max and the global stop are `sparserl.estimators.osla_round`, inside `run_osla`
(V_0.5: Generalist Value Model as a Prior for Sparse RL Rollouts, arXiv 2603.10848:
stopping rule Theorem 3.6, workflow Section 4.1.3). Priors p come from the method spec
(``prior.kind: constant``) or from each prompt's JSON label ("prior"), see `experience`.

Dispatch padding (the paper pads each cluster dispatch to a multiple of 32): every dispatch,
round 0 included, is padded up to a multiple of `dispatch_multiple` (``osla.pad_multiple`` and the
actor ranks' micro-batches, so every rank gets the same number of full micro-batches) WITH EXTRA SAMPLES OF THE
PROMPTS IN THAT DISPATCH (round-robin in batch order, so extras go to prompts that still want
more). Padding rollouts are real rollouts of their prompt and ARE TRAINED ON (the estimator
groups by uid and handles the larger groups), but the stopping rule does not see them: run_osla
gets exactly the rewards it asked for, so its decisions are Theorem 3.6's. A rollout cap
(``osla.max_rollouts_per_step``) counts the padded dispatches, which are what trains. Because every
dispatch is a multiple of the pad, so is the step's rollout count; the launcher sets
``--train.batch_size`` to a divisor of it, so no optimizer step straddles two RL steps.

The step returns ALL rollouts of its prompts (OpenRLHF's parent slices its sample buffer to
batch_size * n_samples_per_prompt; OSLA's count varies, so no buffer is kept). Without ``osla``
in the spec every call goes to the parent unchanged. The last batch's `OslaResult` and the
dispatch sizes are kept in ``self.last_osla`` / ``self.last_dispatches`` for logging.
"""
from __future__ import annotations

import itertools
import math
from typing import List

import numpy as np
import ray
import torch
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator, _collect_prompt_batch
from openrlhf.trainer.ray.vllm_engine import batch_vllm_engine_call

from sparserl.estimators import pad_to_multiple

from sparserl.engines.openrlhf.experience import step_prior
from sparserl.engines.openrlhf.labels import decode_label, method_spec
from sparserl.methods.osla_sampler import run_osla
from sparserl.methods.spec import MethodSpec


def pad_allocation(counts, multiple: int | None) -> np.ndarray:
    """Extra samples per entry so that sum(counts + extra) is a multiple of `multiple`:
    round-robin over the entries in order (the first ones get one more)."""
    counts = np.asarray(counts, dtype=np.int64)
    extra = np.zeros_like(counts)
    if not multiple or len(counts) == 0:
        return extra
    need = pad_to_multiple(int(counts.sum()), int(multiple)) - int(counts.sum())
    extra += need // len(counts)
    extra[: need % len(counts)] += 1
    return extra


def dispatch_multiple(args, pad_multiple: int | None) -> int:
    """The multiple every OSLA dispatch is padded to: lcm of ``osla.pad_multiple``,
    rollout.micro_batch_size x R, train.micro_batch_size x R and train.batch_size, with R the
    actor's data-parallel ranks (num_nodes x num_gpus_per_node / (ring_attn_size x tp)).

    Why: OpenRLHF splits a step's rollouts into chunks of rollout.micro_batch_size and hands
    each rank ceil(chunks / R) of them (`async_run_method_batch`); 224 rollouts in chunks of 8 on
    8 ranks give 28 chunks, 4 per rank, and rank 7 none. A rank with fewer forward or backward
    calls than the others hangs ZeRO-3's collectives. Equal full chunks per rank need the count to
    be a multiple of micro_batch_size x R; a multiple of train.batch_size keeps whole optimizer steps."""
    def get(section, name, default=1):
        return int(getattr(getattr(args, section, None), name, None) or default)

    ranks = (get("actor", "num_nodes") * get("actor", "num_gpus_per_node")
             // max(1, get("ds", "ring_attn_size") * get("ds", "tensor_parallel_size")))
    ranks = max(1, ranks)
    return math.lcm(int(pad_multiple or 1), get("rollout", "micro_batch_size") * ranks,
                    get("train", "micro_batch_size") * ranks, get("train", "batch_size"))


def osla_priors(labels, spec: MethodSpec, args=None) -> np.ndarray:
    """Prior p per prompt: the spec's constant, the label's static "prior", or the live prior
    queried with the prompts' uids (`experience.step_prior`)."""
    decoded = [decode_label(lab) for lab in labels]
    uids = [str(d.get("uid")) for d in decoded]
    return step_prior(args, spec, decoded, uids, f"OSLA with prior kind {spec.prior.kind!r}")


def binary_reward(e) -> float:
    """The {0,1} outcome the stopping rule sees (a partial-credit reward counts as a pass at >= 0.5)."""
    r = e.rewards if e.rewards is not None else e.scores
    if r is None:
        raise ValueError("OSLA needs a reward per rollout: set --reward.remote_url (our reward_func)")
    return 1.0 if float(r.reshape(-1)[0]) >= 0.5 else 0.0


class OslaSamplesGenerator(SamplesGenerator):
    """SamplesGenerator running OSLA rounds when the method spec has ``osla`` (see module doc)."""

    @torch.no_grad()
    def generate_samples(self, **generate_kwargs):
        spec = method_spec(self.args)
        if spec is None or spec.osla is None:
            return super().generate_samples(**generate_kwargs)
        if getattr(self, "_dataloader_iter", None) is None:
            self._dataloader_iter = iter(self.prompts_dataloader)
        prompts, labels, images, exhausted = _collect_prompt_batch(self._dataloader_iter,
                                                                   self.args.rollout.batch_size)
        if exhausted:
            self._dataloader_iter = None
        if not prompts:
            return [], None, 0, True
        sleep = getattr(self.args.vllm, "enable_sleep", False)
        if sleep:
            batch_vllm_engine_call(self.vllm_engines, "wake_up")
        try:
            experiences = self.osla_generate(prompts, labels, images, spec=spec, **generate_kwargs)
        finally:
            if sleep:
                batch_vllm_engine_call(self.vllm_engines, "sleep")
        return experiences, None, len(prompts), exhausted

    def osla_generate(self, prompts, labels, images=None, *, spec=None, **generate_kwargs) -> List:
        """Run OSLA on one prompt batch; all rollouts (padding included) as Experiences, grouped by prompt."""
        spec = method_spec(self.args) if spec is None else spec
        o = spec.osla
        images = list(images) if images is not None else [None] * len(prompts)
        per_prompt: list[list] = [[] for _ in prompts]
        dispatches: list[dict] = []
        pad = dispatch_multiple(self.args, o.pad_multiple)

        def sample_fn(idx, counts):
            idx = np.asarray(idx, dtype=np.int64)
            counts = np.asarray(counts, dtype=np.int64)
            total = counts + pad_allocation(counts, pad)
            got = self.dispatch_round([prompts[i] for i in idx], [labels[i] for i in idx],
                                      [images[i] for i in idx], total, **generate_kwargs)
            out = []
            for i, n, exps in zip(idx, counts, got):
                per_prompt[i].extend(exps)
                out.append(np.array([binary_reward(e) for e in exps[:n]]))
            dispatches.append({"requested": int(counts.sum()), "dispatched": int(total.sum()),
                               "prompts": len(idx)})
            return out

        self.last_osla = run_osla(sample_fn, osla_priors(labels, spec, self.args), k_init=o.k_init,
                                  k_step=o.k_step, c=o.c, k_max=o.k_max, global_stop=o.global_stop,
                                  pad_multiple=pad, max_rollouts=o.max_rollouts_per_step)
        self.last_dispatches = dispatches
        return list(itertools.chain.from_iterable(per_prompt))

    def dispatch_round(self, prompts, labels, images, counts, **generate_kwargs) -> list[list]:
        """One OSLA round: counts[j] rollouts of prompts[j], as OpenRLHF Experiences per prompt.

        Prompts asking for the same count share one `_dispatch_prompts_to_vllm` call (it takes one
        n_samples_per_prompt per call); all calls are issued before any result is awaited.
        """
        counts = [int(c) for c in counts]
        kw = {k: v for k, v in generate_kwargs.items() if k != "n_samples_per_prompt"}
        pending = []
        for n in sorted(set(counts)):
            if n <= 0:
                continue
            sel = [j for j, c in enumerate(counts) if c == n]
            refs = self._dispatch_prompts_to_vllm([prompts[j] for j in sel], [labels[j] for j in sel],
                                                  images=[images[j] for j in sel], n_samples_per_prompt=n, **kw)
            pending.append((sel, refs))
        out: list[list] = [[] for _ in prompts]
        for sel, refs in pending:
            for j, responses in zip(sel, ray.get(refs)):
                out[j] = [self._process_response_into_experience(r, **kw) for r in responses]
                if len(out[j]) != counts[j]:
                    raise RuntimeError(f"vLLM returned {len(out[j])} samples for a prompt, asked for {counts[j]}")
        return out


__all__ = ["OslaSamplesGenerator", "binary_reward", "dispatch_multiple", "osla_priors", "pad_allocation"]
