"""The local RL trainer (CPU, tiny and small scales): one loop for every method.

    for step:
        sample prompts                          (rollouts_per_step / group_size of them)
        generate n per prompt                   (OSLA: in rounds until its stopping rules end the batch;
                                                 DAPO: dynamic sampling until the batch is full)
        score with the verifier                 (reward in {0, 1}; DAPO adds overlong shaping)
        advantages from the estimator registry  (the same functions the OpenRLHF plugin calls)
        policy loss (PPO-clip / clip-higher / GSPO / GPG) + optional KL to the reference, AdamW

State (model, optimiser, RNG, support buffer, BASIS's preceding batch, metrics) is checkpointed
every `rl.checkpoint_every` steps; a killed run resumes from it and gives the same metrics.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sparserl.core.artifacts import atomic_write_text, config_hash, read_table, write_table
from sparserl.estimators import EstimatorContext, get_estimator
from sparserl.core.paths import Paths
from sparserl.engines.local.losses import LOSSES, kl_k3, token_logprobs
from sparserl.methods.spec import (estimator_options, load_method, needs_reference_cache, prompts_per_step,
                                 total_steps)
from sparserl.rollout import SamplingParams, rollout
from sparserl.rollout.base import RolloutBatch
from sparserl.tasks import format_prompt


class KilledForTest(RuntimeError):
    """Raised by `train(..., stop_after=k)` to simulate a kill after k steps."""


def run_dir(cfg: dict, method: str, seed: int) -> Path:
    return Paths(cfg).stage("rl", method, f"seed{seed}")


def snapshot_steps(rl: dict, method: dict) -> list[int]:
    """Steps whose intermediate checkpoint is kept for evaluation (`rl.eval_fractions`)."""
    n = total_steps(rl, method)
    return sorted({max(1, round(f * n)) for f in rl.get("eval_fractions", [])} - {n})


def snapshot_name(step: int) -> str:
    return f"step{step:05d}"


def _concat(batches: list[RolloutBatch], prompts: list[str]) -> RolloutBatch:
    """Merge batches generated for subsets of the same prompt list (indices already global)."""
    out = RolloutBatch(prompts=prompts, prompt_ids=[[] for _ in prompts],
                       prompt_index=np.concatenate([b.prompt_index for b in batches]).astype(np.int64),
                       response_ids=[r for b in batches for r in b.response_ids],
                       logprobs=[x for b in batches for x in b.logprobs],
                       texts=[t for b in batches for t in b.texts],
                       finish_reason=[f for b in batches for f in b.finish_reason],
                       rewards=np.concatenate([b.rewards for b in batches]).astype(np.float32))
    for b in batches:
        for i, ids in enumerate(b.prompt_ids):
            if ids:
                out.prompt_ids[i] = ids
    return out


def overlong_penalty(lengths: np.ndarray, max_len: int, buffer: int, penalty: float) -> np.ndarray:
    """DAPO's soft overlong punishment: 0 up to max_len - buffer, then linear down to -penalty."""
    start = max_len - buffer
    return -penalty * np.clip((lengths - start) / max(buffer, 1), 0.0, 1.0)


class Trainer:
    def __init__(self, cfg: dict, method_name: str, seed: int, threads: int = 1, log=print):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from sparserl.rollout.hf import HFBackend

        torch.set_num_threads(threads)
        self.cfg, self.seed, self.log = cfg, seed, log
        self.rl = cfg["rl"]
        self.m = load_method(method_name)
        self.P = Paths(cfg)
        self.dir = run_dir(cfg, method_name, seed)
        policy_path = str(self.P.policy(self.rl["policy"]))
        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_pretrained(policy_path)
        self.tok = AutoTokenizer.from_pretrained(policy_path)
        self.ref_model = None
        if self.m["kl_coef"] > 0:
            self.ref_model = AutoModelForCausalLM.from_pretrained(policy_path).eval()
        self.backend = HFBackend(self.model, self.tok, batch_size=cfg["rollout"].get("batch_size", 256))
        self.pool = read_table(self.P.train_pool())
        self.prompts = [format_prompt(cfg, p, self.tok) for p in self.pool["problem"]]
        self.steps = total_steps(self.rl, self.m)
        self.n_prompts = prompts_per_step(self.m, self.rl["rollouts_per_step"])
        self.params = SamplingParams(temperature=self.rl.get("temperature", 1.0), top_p=1.0,
                                     max_new_tokens=self.rl.get("max_new_tokens",
                                                                cfg["rollout"].get("max_new_tokens", 16)))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.rl.get("lr", 1e-4),
                                     weight_decay=self.rl.get("weight_decay", 0.0))
        self.rng = np.random.default_rng(seed)
        self.step = 0
        self.metrics: list[dict] = []
        self.support: deque = deque(maxlen=self.m.get("support_buffer", {}).get("size", 512))
        self.prev_basis: tuple | None = None
        self._step_prior: dict | None = None  # prior p of this step's prompts (V0.5)
        reference = self._reference()
        self.cached_phat = None if reference is None else \
            dict(zip(reference["prompt_id"], reference["phat"].astype(float)))
        self.prior = self._make_prior(reference)

    # side data -------------------------------------------------------------------------------
    def _reference(self) -> pd.DataFrame | None:
        """The starting policy's reference rollouts (BASIS's phat, the oracle prior's counts)."""
        if not needs_reference_cache(self.m):
            return None
        return read_table(self.P.reference_cache(self.rl["policy"]))

    def _make_prior(self, reference):
        spec = self.m.get("prior")
        if not spec:
            return None
        from sparserl.values.priors import prior_for_method
        return prior_for_method(spec, reference, self.seed, cfg=self.cfg)

    # checkpoints -----------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.dir / "ckpt" / "last.pt"

    def _key(self) -> str:
        return config_hash({"rl": self.rl, "method": self.m, "seed": self.seed,
                            "policy": str(self.P.policy(self.rl["policy"]))})

    def save_state(self) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                    "rng": self.rng.bit_generator.state, "step": self.step,
                    "metrics": self.metrics, "support": list(self.support),
                    "prev_basis": self.prev_basis, "key": self._key(),
                    "prior_state": getattr(self.prior, "state", None)}, tmp)
        os.replace(tmp, self.state_file)
        self.write_metrics()

    def try_resume(self) -> bool:
        if not self.state_file.exists():
            return False
        st = torch.load(self.state_file, weights_only=False)
        if st.get("key") != self._key():
            self.log(f"[rl] {self.state_file} belongs to another setting; starting over")
            return False
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.rng.bit_generator.state = st["rng"]
        self.step, self.metrics = st["step"], st["metrics"]
        self.support.extend(st["support"])
        self.prev_basis = st["prev_basis"]
        self.log(f"[rl] resumed {self.dir} at step {self.step}/{self.steps}")
        return True

    def write_metrics(self) -> None:
        if self.metrics:
            write_table(pd.DataFrame(self.metrics), self.dir / "metrics.parquet", cfg=self.cfg,
                        extra={"method": self.m["name"], "seed": self.seed, "steps": self.steps})

    # sampling --------------------------------------------------------------------------------
    def _gen(self, idx: np.ndarray, n, ver, salt: int) -> RolloutBatch:
        s = self.seed * 1_000_003 + self.step * 1009 + salt
        b = rollout(self.backend, [self.prompts[i] for i in idx],
                    list(self.pool["answer"].iloc[idx]), n, self.params, s, ver)
        return b

    def sample(self, ver, info: dict) -> tuple[np.ndarray, RolloutBatch]:
        """Prompt indices of this step and their scored rollouts (prompt_index into them)."""
        m = self.m
        self.model.eval()
        self._step_prior = None
        if m.get("osla"):
            return self._sample_osla(ver, info)
        if m.get("dynamic_sampling", {}).get("enabled"):
            return self._sample_dynamic(ver, info)
        idx = self.rng.choice(len(self.pool), self.n_prompts, replace=False)
        b = self._gen(idx, m["group_size"], ver, 0)
        info["rollouts_generated"] = len(b)
        return idx, b

    def _sample_dynamic(self, ver, info):
        """DAPO: draw gen_batch_factor x the prompt batch, keep groups whose rewards differ,
        repeat until the batch is full (at most 8 draws; a short batch then trains as is)."""
        factor = self.m["dynamic_sampling"].get("gen_batch_factor", 3)
        G, kept, batches, generated = self.m["group_size"], [], [], 0
        for draw in range(8):
            idx = self.rng.choice(len(self.pool), int(round(self.n_prompts * factor)), replace=False)
            b = self._gen(idx, G, ver, 100 + draw)
            generated += len(b)
            r = b.rewards.reshape(len(idx), G)  # rows come out grouped by prompt, G each
            mixed = np.flatnonzero(r.min(1) != r.max(1))
            for j in mixed:
                if len(kept) < self.n_prompts and idx[j] not in {k for k, _ in kept}:
                    kept.append((idx[j], (b, j)))
            if len(kept) >= self.n_prompts:
                break
        info["rollouts_generated"] = generated
        info["dynamic_sampling_draws"] = draw + 1
        info["dynamic_sampling_kept"] = len(kept)
        if not kept:  # nothing to learn from this step
            idx = self.rng.choice(len(self.pool), self.n_prompts, replace=False)
            return idx, self._gen(idx, G, ver, 199)
        idx = np.array([k for k, _ in kept])
        parts = []
        for new_i, (_, (b, j)) in enumerate(kept):
            rows = np.flatnonzero(b.prompt_index == j)
            parts.append(RolloutBatch(
                prompts=[], prompt_ids=[b.prompt_ids[j]], prompt_index=np.full(len(rows), new_i),
                response_ids=[b.response_ids[r] for r in rows], logprobs=[b.logprobs[r] for r in rows],
                texts=[b.texts[r] for r in rows], finish_reason=[b.finish_reason[r] for r in rows],
                rewards=b.rewards[rows]))
        merged = _concat(parts, [self.prompts[i] for i in idx])
        merged.prompt_ids = [p.prompt_ids[0] for p in parts]
        return idx, merged

    def _sample_osla(self, ver, info):
        """V0.5: prior before any rollout, then OSLA rounds (sparserl.methods.osla_sampler)."""
        from sparserl.methods.osla_sampler import run_osla
        o = self.m["osla"]
        idx = self.rng.choice(len(self.pool), self.n_prompts, replace=False)
        pids = self.pool["id"].to_numpy()[idx]
        ctx = self._context()
        p = np.asarray(self.prior(list(pids), ctx), dtype=float)
        batches: list[RolloutBatch] = []
        round_no = [0]

        def sample_fn(prompt_indices, counts):
            b = self._gen(idx[prompt_indices], counts, ver, 300 + round_no[0])
            round_no[0] += 1
            pi_arr = np.asarray(prompt_indices)
            b.prompt_index = pi_arr[b.prompt_index]  # back to batch positions
            full = [[] for _ in idx]
            for j, pi in enumerate(pi_arr):
                full[pi] = b.prompt_ids[j]
            b.prompt_ids = full
            batches.append(b)
            return [b.rewards[b.prompt_index == pi] for pi in prompt_indices]

        res = run_osla(sample_fn, p, k_init=o["k_init"], k_step=o["k_step"], c=o["c"],
                       k_max=o["k_max"], global_stop=o["global_stop"],
                       pad_multiple=o.get("pad_multiple"))
        merged = _concat(batches, [self.prompts[i] for i in idx])
        ks = np.bincount(merged.prompt_index, minlength=len(idx))
        info["rollouts_generated"] = len(merged)
        info["osla_rounds"] = round_no[0]
        info["osla_k_mean"] = float(ks.mean())
        info["osla_k_max_hit"] = float((ks >= o["k_max"]).mean())
        info["osla_dispatched"] = res.dispatched_rollouts or len(merged)
        info["osla_reject_rate"] = float(np.mean(res.delta2_init > 0))
        info["osla_stop_round_mean"] = float(res.stop_round.mean())
        for r in ("test", "target", "k_max", "global"):
            info[f"osla_stop_{r}"] = float(np.mean(res.stop_reason == r))
        info["prior_mean"] = float(p.mean())
        self._step_prior = dict(zip(pids, p))
        return idx, merged

    def _context(self):
        sb = self.m.get("support_buffer", {})
        n = min(sb.get("context", 256), len(self.support))
        if n == 0:
            return []
        pick = self.rng.choice(len(self.support), n, replace=False)
        return [self.support[i] for i in pick]

    # advantages ------------------------------------------------------------------------------
    def advantages(self, idx, batch, info) -> np.ndarray:
        m = self.m
        pids = self.pool["id"].to_numpy()[idx][batch.prompt_index]
        ctx = EstimatorContext()
        if m["estimator"].startswith("v05"):
            if self._step_prior is None:  # fixed k: query the prior now (OSLA did before sampling)
                step_ids = self.pool["id"].to_numpy()[idx]
                p = np.asarray(self.prior(list(step_ids), self._context()), dtype=float)
                info["prior_mean"] = float(p.mean())
                self._step_prior = dict(zip(step_ids, p))
            ctx.prior = self._step_prior
        if m["estimator"].startswith("basis"):
            b = m.get("basis", {})
            ctx.phat = {pid: self.cached_phat[pid] for pid in set(pids)}
            ctx.calibrate_on = b.get("calibrate_on", "current")
            if b.get("beta") is not None:
                ctx.beta = float(b["beta"])
            if ctx.calibrate_on == "previous" and self.prev_basis is not None:
                ctx.prev_phat, ctx.prev_rewards = self.prev_basis
        est_info: dict = {}
        adv = get_estimator(m["estimator"])(batch.rewards, pids, ctx=ctx, info=est_info,
                                            **estimator_options(m))
        if m["estimator"].startswith("basis"):
            self.prev_basis = (np.array([self.cached_phat[p] for p in pids]), batch.rewards.copy())
        for k, v in est_info.items():
            if isinstance(v, str):
                continue
            if np.isscalar(v):
                info[f"est_{k}"] = float(v)
            else:
                a = np.asarray(v)
                if a.dtype.kind not in "fiub":
                    continue
                a = a.astype(float)
                if a.size:
                    info[f"est_{k}_mean"] = float(np.nanmean(a))
                    info[f"est_{k}_p90"] = float(np.nanpercentile(a, 90))
        return np.asarray(adv, dtype=np.float32)

    # update ----------------------------------------------------------------------------------
    def update(self, batch: RolloutBatch, adv: np.ndarray, info: dict) -> None:
        m = self.m
        loss_fn = LOSSES[m["loss"]["type"]]
        lk = {k: v for k, v in m["loss"].items() if k in ("clip_low", "clip_high", "agg")}
        seqs = [batch.prompt_ids[batch.prompt_index[i]] + list(batch.response_ids[i])
                for i in range(len(batch))]
        plens = [len(batch.prompt_ids[batch.prompt_index[i]]) for i in range(len(batch))]
        mb = self.rl.get("micro_batch_size", 256)
        self.model.train()
        stats = {"loss": 0.0, "clip_frac": 0.0, "entropy": 0.0, "kl": 0.0}
        # mini_batches > 1: several optimiser steps per rollout step (OpenRLHF's train batch <
        # rollout batch), so later ones are off-policy and the ratio, clip and GSPO matter
        n_mini = max(1, min(self.rl.get("mini_batches", 1), len(seqs)))
        order_rng = np.random.default_rng((self.seed, self.step))
        grad_norms = []
        updates = 0
        for epoch in range(self.rl.get("ppo_epochs", 1)):
            for mini in np.array_split(order_rng.permutation(len(seqs)), n_mini):
                self.opt.zero_grad(set_to_none=True)
                tokens_total = sum(len(seqs[i]) - plens[i] for i in mini)
                for start in range(0, len(mini), mb):
                    sl = mini[start:start + mb]
                    s_seqs, s_plens = [seqs[i] for i in sl], [plens[i] for i in sl]
                    logp, mask, ent = token_logprobs(self.model, s_seqs, s_plens,
                                                     self.tok.pad_token_id, with_entropy=True)
                    # pi_old: the behaviour policy's log-probs recorded at rollout time
                    old = torch.zeros_like(logp)
                    for j, i in enumerate(sl):
                        lp = batch.logprobs[i]
                        old[j, :len(lp)] = torch.as_tensor(lp)
                    a = torch.as_tensor(adv[sl])
                    loss, clip = loss_fn(logp, old, a, mask, **lk)
                    w = (mask.sum() / max(tokens_total, 1)).item() if lk.get("agg") == "token_mean" \
                        else len(sl) / len(mini)
                    total = loss * w
                    if self.ref_model is not None:
                        with torch.no_grad():
                            ref_lp, _ = token_logprobs(self.ref_model, s_seqs, s_plens, self.tok.pad_token_id)
                        kl = ((kl_k3(logp, ref_lp) * mask).sum() / mask.sum().clamp(min=1))
                        total = total + m["kl_coef"] * kl * w
                        stats["kl"] += float(kl.detach()) * w
                    total.backward()
                    stats["loss"] += float(loss.detach()) * w
                    stats["clip_frac"] += float(clip) * w
                    stats["entropy"] += float((ent * mask).sum() / mask.sum().clamp(min=1)) * w
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)))
                self.opt.step()
                updates += 1
        for k in stats:
            stats[k] /= updates
        gn = float(np.mean(grad_norms))
        info["grad_norm"] = gn
        info["optimizer_steps"] = updates
        info.update(stats)
        self.model.eval()

    # loop ------------------------------------------------------------------------------------
    def run(self, stop_after: int | None = None) -> Path:
        from sparserl.grading.verifier import open_verifier
        if not self.try_resume():
            # intermediate checkpoints of an earlier setting must not reach this run's evaluation
            for stale in ("checkpoints", "eval"):
                shutil.rmtree(self.dir / stale, ignore_errors=True)
        every = self.rl.get("checkpoint_every", 10)
        snaps = set(snapshot_steps(self.rl, self.m))
        total_rollouts = int(sum(r["rollouts_generated"] for r in self.metrics))
        with open_verifier(self.cfg) as ver:
            while self.step < self.steps:
                t0 = time.time()
                info: dict = {}
                idx, batch = self.sample(ver, info)
                rewards = batch.rewards.astype(np.float32)
                raw = rewards.copy()
                ov = self.m.get("overlong", {})
                if ov.get("enabled"):
                    L = self.params.max_new_tokens
                    buf = max(1, int(round(ov.get("buffer_fraction", 0.25) * L)))
                    pen = overlong_penalty(batch.response_lengths(), L, buf, ov.get("penalty", 1.0))
                    batch.rewards = rewards + pen.astype(np.float32)
                    info["overlong_penalty_mean"] = float(pen.mean())
                adv = self.advantages(idx, batch, info)
                self.update(batch, adv, info)
                pids = self.pool["id"].to_numpy()[idx]
                self.support.extend(zip(pids[batch.prompt_index].tolist(), raw.tolist()))
                k = np.bincount(batch.prompt_index, minlength=len(idx))
                total_rollouts += info["rollouts_generated"]
                self.step += 1
                row = {"step": self.step, "reward_mean": float(raw.mean()),
                       "response_len_mean": float(batch.response_lengths().mean()),
                       "prompts": len(idx), "rollouts_trained": len(batch),
                       "rollouts_per_prompt_mean": float(k.mean()),
                       "rollouts_per_prompt_min": int(k.min()), "rollouts_per_prompt_max": int(k.max()),
                       "rollouts_total": total_rollouts,
                       "zero_adv_frac": float(np.mean(np.abs(adv) < 1e-8)),
                       "adv_abs_mean": float(np.abs(adv).mean()),
                       "support_size": len(self.support), "wall_time_s": time.time() - t0, **info}
                self.metrics.append(row)
                self.log(f"[rl {self.m['name']} s{self.seed}] step {self.step}/{self.steps} "
                         f"reward {row['reward_mean']:.3f} rollouts {len(batch)} "
                         f"gn {row['grad_norm']:.3f} ({row['wall_time_s']:.1f}s)")
                if self.step in snaps:
                    self._save_hf(self.dir / "checkpoints" / snapshot_name(self.step))
                if self.step % every == 0 or self.step == self.steps:
                    self.save_state()
                if stop_after is not None and self.step >= stop_after and self.step < self.steps:
                    raise KilledForTest(f"stopped after step {self.step}")
        self._save_hf(self.dir / "final")
        self.write_metrics()
        # the state only serves a killed run; a finished run asked again starts over
        shutil.rmtree(self.state_file.parent, ignore_errors=True)
        return self.dir

    def _save_hf(self, out: Path) -> None:
        from sparserl.models.policies import save_hf
        save_hf(self.model, self.tok, out, {"method": self.m["name"], "seed": self.seed,
                                             "step": self.step, "scale": self.cfg["scale"],
                                             "rl_policy": self.rl["policy"]})


def train(cfg: dict, method: str, seed: int, threads: int = 1, stop_after: int | None = None,
          log=print) -> Path:
    return Trainer(cfg, method, seed, threads=threads, log=log).run(stop_after=stop_after)
