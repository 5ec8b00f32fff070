"""The local RL trainer (CPU, tiny and small scales): one loop for every method.

    for step:
        sample prompts                          (rollouts_per_step / group_size of them, or the
                                                 method's prompts_per_step)
        generate n per prompt                   (OSLA: in rounds until its stopping rules end the batch;
                                                 DAPO: dynamic sampling until the batch is full)
        score with the verifier                 (reward in {0, 1}; DAPO adds overlong shaping)
        advantages from the methods layer       (side data from the estimator's needs; the same call
                                                 the OpenRLHF experience maker makes)
        critic methods (VF, Pvf, Tether, EVPO)  token advantages from Le Critique's critic, read before
                                                 the batch enters its replay, then one value update
                                                 (`critic_loop`, as Le Critique's loop runs it)
        policy loss (PPO-clip / clip-higher / GSPO / GPG) + optional KL to the reference, AdamW

A critic method trains its critic single-turn on the math pool: the critic reads prompt +
privileged context + response, the policy prompt + response (`values.critic_inputs`). Privileged
`answer` is the pool row's reference answer, `loo_group` the other K-1 responses of the prompt
and their rewards. Its `warmup_updates` (20) value updates run on start-policy batches of their own
prompt stream before step 1; their rollouts are counted in `critic_warmup_rollouts`, not in
`rollouts_total` (the policy's budget per step, matched across methods), and their time is in step
1's `wall_time_s`. The scale's `rl.critic_lr` replaces the method's `critic.lr`.

State (model, optimiser, RNG, support buffer, BASIS's preceding batch, the critic and its replay,
metrics) is checkpointed every `rl.checkpoint_every` steps; a killed run resumes from it and gives
the same metrics. The state holds the run's key (`methods.run.Run.key`, the key of the rule that
trains it) and lr: a state of another key or lr (a setting changed since the kill) is not resumed,
the run starts over and logs which settings changed. A NaN or infinite loss, gradient norm or
weight stops the run at that step (`NonFiniteError`, before the optimiser step or save that would
spread it), so the last checkpoint stays finite; `SPARSERL_TEST_INJECT_NAN_AT_STEP=k` (tests only) makes step k's loss NaN.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sparserl.core.artifacts import manifest_path, read_table, write_table
from sparserl.core.config import ConfigError, rl_max_new_tokens, section_setting, settings_diff
from sparserl.core.logs import get_logger, progress
from sparserl.core.runlog import RunLog, flatten
from sparserl.engines.local.adamw import AdamW
from sparserl.engines.local.critic_loop import (CriticLoop, critic_rows, evaluate_critic, make_critic,
                                                token_values)
from sparserl.engines.local.losses import LOSSES, kl_k3, token_logprobs
from sparserl.grading.verifier import open_verifier
from sparserl.methods.sampling import Sampled, make_sampler
from sparserl.methods.sidedata import CalibrationState, SideData, advantages, flatten_info
from sparserl.methods.run import Run
from sparserl.methods.spec import run_settings
from sparserl.rollout import SamplingParams, make_live_backend, rollout
from sparserl.rollout.base import RolloutBatch
from sparserl.tasks import format_prompt
from sparserl.values.priors import prior_for_method
from sparserl.values.support import LivePrior, SupportBuffer


_log = get_logger(__name__)


class KilledForTest(RuntimeError):
    """Raised by `train(..., stop_after=k)` to simulate a kill after k steps."""


class NonFiniteError(RuntimeError):
    """A step's loss, gradient norm or weights are NaN or infinite: the run stops before the
    optimiser step (or the save) that would spread them, and its last checkpoint stays finite."""


# test-only hook: the policy loss of this step (1-based) is made NaN, to test the stop above
INJECT_NAN_ENV = "SPARSERL_TEST_INJECT_NAN_AT_STEP"


def overlong_penalty(lengths: np.ndarray, max_len: int, buffer: int, penalty: float) -> np.ndarray:
    """DAPO's soft overlong punishment: 0 up to max_len - buffer, then linear down to -penalty."""
    start = max_len - buffer
    return -penalty * np.clip((lengths - start) / max(buffer, 1), 0.0, 1.0)


def load_policy(path: str, backend: str):
    """(model, tokenizer) to train. With the CPU engine a Qwen3 checkpoint loads into our plain
    torch Qwen3 (`models.qwen3`; same files, same logits) and nothing imports transformers (about
    3 s a job); the `hf` backend and other architectures load transformers' model."""
    cfg_file = Path(path) / "config.json"
    if backend == "cpu" and cfg_file.is_file() and \
            json.loads(cfg_file.read_text()).get("model_type") == "qwen3":
        from sparserl.models.qwen3 import Qwen3LM
        from sparserl.rollout.cpu_engine import load_tokenizer
        return Qwen3LM.from_dir(path), load_tokenizer(path)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from sparserl.core.weights import check_hf_weights
    check_hf_weights(path)  # a truncated or foreign model.safetensors: one line, the file and the fix
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _our_qwen3(setting: str, models) -> list:
    """The given models (None skipped), each our Qwen3LM: `setting` (rl.precision, rl.compile)
    switches what only it has, so any other class is a ConfigError naming the way out."""
    out = [m for m in models if m is not None]
    for model in out:
        if not hasattr(model, "matmul_dtype"):
            from sparserl.core.config import ConfigError
            raise ConfigError(f"{setting} runs on the CPU engine's Qwen3 policies only, not "
                              f"{type(model).__name__}; set {setting.split(':')[0]}: "
                              f"{'fp32' if 'precision' in setting else 'false'} or rollout.backend: cpu")
    return out


def set_precision(rl: dict, *models) -> None:
    """`rl.precision`: bf16 runs the policy's (and the KL reference's) matmuls in bf16 with float32
    master weights (`Qwen3LM.matmul_dtype`); rollouts stay float32. Only our Qwen3LM has the switch.
    On a CPU without bf16 kernels the matmuls stay float32 (`core.machine.matmul_precision`)."""
    from sparserl.core.machine import matmul_precision
    precision = section_setting(rl, "$defs", "trainer", "precision")
    if precision == "fp32":
        return
    ours = _our_qwen3(f"rl.precision: {precision}", models)
    if matmul_precision(precision, "rl.precision", log=_log.warning) == "fp32":
        return
    for model in ours:
        model.matmul_dtype = torch.bfloat16


def compile_layers(*models) -> None:
    """`rl.compile`: each decoder layer of our Qwen3 policies through `torch.compile` (inductor's
    fused C++ kernels for the norms, RoPE and SwiGLU around the matmuls; shapes dynamic, so one
    graph serves every batch). It costs 10-25 s a process (the first on a machine compiles, later
    ones read inductor's cache) and saves about a quarter of a small step (perf/rl_step.py)."""
    for model in _our_qwen3("rl.compile", models):
        model.compile_layers()


def require_checkpoint(cfg: dict, ref: str, path: str) -> None:
    """ConfigError naming the path and the Snakemake target that builds it when the pre-trained
    start policy `ref` (rl.policy) has no checkpoint; without this check transformers would read
    the missing folder as a hub repo id and fail with "Repo id must be ..."."""
    from sparserl.core.config import ConfigError
    name = ref.split("@")[0]
    if cfg["policies"][name]["source"] != "pretrain" or (Path(path) / "config.json").is_file():
        return
    raise ConfigError(f"{path}: the start policy '{ref}' (rl.policy) has no checkpoint there; build it "
                      f"first (`snakemake --cores 2 {path}`, rule pretrain_policy) or set rl.policy to a "
                      "policy that is built")


class Trainer(CriticLoop):
    share_prompts = False  # rl.share_prompts, set by `load_models` (critique.rl has no such key: off)
    def __init__(self, cfg: dict, run: Run, threads: int = 1, log=_log.info):
        """Train `run` (`methods.run.resolve_run`: its method, seed, folder, lr, steps, snapshot
        steps and key) under `cfg`, the config it was resolved from.

        Every local trainer builds in this order, which is the order of its torch and numpy draws
        (a run's outputs depend on it): the run's record, `setup_task` (settings, checks, the start
        policy's folder; no draws), `load_models` (torch seeded, policy, KL reference, live backend),
        `setup_generation`, the optimiser, the numpy stream, `setup_sampler` (what draws from it),
        the critic. A trainer of another loop (`critique.CritiqueTrainer`) overrides the hooks."""
        torch.set_num_threads(threads)
        if run.lr is None:
            raise ValueError(f"{run.dir}: the run was resolved without its tuned lr (read_choice=False); "
                             "resolve it with resolve_run(cfg, method, seed) to train it")
        self.cfg, self.record, self.seed, self.log = cfg, run, run.seed, log
        self.m = run.spec  # the scale's critic lr in place
        self.run_paths = run.paths
        self.dir = self.run_paths.dir
        # the steps rl.lr_tuning's validation rule chose for the method's setting, else the horizon
        self.steps = run.steps
        self.n_prompts = run.prompts_per_step
        # rl.lr, or the method family's tuned lr (rl.lr_tuning), or the rate the run was given
        self.lr, self.lr_source = run.lr, run.lr_source
        self.load_models(*self.setup_task())
        self.setup_generation()
        # torch.optim's arithmetic, without its 1.45 s import of torch._dynamo (adamw.py)
        self.opt = AdamW(self.model.parameters(), lr=self.lr, weight_decay=self.weight_decay())
        self.rng = np.random.default_rng(self.seed)
        self.step = 0
        self.metrics: list[dict] = []
        self.calibration = CalibrationState()
        self.setup_sampler()
        # Le Critique's critic (token-level estimators): a copy of the start policy, new head
        self.critic = None
        if self.m.needs_critic:
            self.critic = make_critic(self.model, self.m, self.tok.pad_token_id, self.seed, self.rl)
        if self.rl.get("compile"):  # after the critic's copy of the policy, which compiles its own
            compile_layers(self.model, self.ref_model, *([self.critic.model.body] if self.critic else []))
        self.warmup_done = 0

    # construction hooks (`__init__`) ---------------------------------------------------------
    def setup_task(self) -> tuple[str, str]:
        """The run's settings (`self.rl`) and checks before anything loads; returns the start
        policy's folder and the rollout backend that loads it."""
        cfg = self.cfg
        self.rl = cfg["rl"]
        if self.m.needs_critic and self.m.sampler != "plain":
            raise ConfigError(f"method {self.m.name!r}: a critic trains with the plain sampler only (got "
                              f"{self.m.sampler!r}); drop osla / budget / dynamic_sampling from "
                              f"configs/methods/{self.m.name}.yaml")
        self.reads = self.record.reads  # the run's input files (`methods.run.RunInputs`)
        policy_path = str(self.reads.policy)
        require_checkpoint(cfg, self.rl["policy"], policy_path)
        return policy_path, cfg["rollout"]["backend"]

    def load_models(self, policy_path: str, backend: str) -> None:
        """Torch seeded with the run's seed, then the policy, its KL reference (kl_coef > 0),
        `rl.precision` and `rl.share_prompts`, and the live rollout backend over the policy."""
        torch.manual_seed(self.seed)
        self.model, self.tok = load_policy(policy_path, backend)
        self.ref_model = None
        if self.m.kl_coef > 0:
            self.ref_model = load_policy(policy_path, backend)[0].eval()
        set_precision(self.rl, self.model, self.ref_model)
        # rl.share_prompts: a micro-batch's rows of one prompt share one pass over it (our Qwen3LM)
        self.share_prompts = bool(self.setting("share_prompts"))
        if self.share_prompts:
            _our_qwen3("rl.share_prompts", (self.model,))
        self.backend = make_live_backend(self.cfg, self.model, self.tok)

    def setup_generation(self) -> None:
        """What needs the tokenizer: the pool's prompts, the sampling parameters, the response
        length GAE's lambda "auto" and Tether's buckets read."""
        self.pool = read_table(self.reads.pool)
        self.pool_ids = self.pool["id"].to_numpy()
        self.prompts = [format_prompt(self.cfg, p, self.tok) for p in self.pool["problem"]]
        self.params = SamplingParams(temperature=self.setting("temperature"), top_p=1.0,
                                     max_new_tokens=rl_max_new_tokens(self.cfg))
        self.response_length = self.params.max_new_tokens  # GAE's lambda "auto", Tether's buckets

    def weight_decay(self) -> float:
        """The policy optimiser's AdamW weight decay."""
        return self.setting("weight_decay")

    def setup_sampler(self) -> None:
        """After the numpy stream: the per-rollout rows, the support buffer, the reference cache,
        the prior and the method's sampler (the buffer and the sampler draw from `self.rng`)."""
        self.harvest: list[dict] = []  # one row per trained rollout (rollouts.parquet)
        self.support = SupportBuffer(self.m.support.size, self.m.support.context, self.rng)
        reference = read_table(self.reads.reference_cache) if self.m.needs_reference_cache else None
        self.cached_phat = None if reference is None else \
            dict(zip(reference["prompt_id"], reference["phat"].astype(float)))
        self.prior = None
        if self.m.prior is not None:
            prior = prior_for_method(dataclasses.asdict(self.m.prior), reference, self.seed, cfg=self.cfg,
                                     reference_source=str(self.reads.reference_cache),
                                     model=self.reads.v0_model, pool=self.reads.pool,
                                     embeddings=self.reads.v0_embeddings)
            self.prior = LivePrior(prior, self.support)
        self._ver = None
        self.sampler = make_sampler(self.m, generate=self._gen, rng=self.rng, pool_ids=self.pool_ids,
                                    prompts=self.prompts, n_prompts=self.n_prompts, prior_fn=self.prior)
        self.warmup_rollouts = 0

    def setting(self, key: str):
        """The run's rl setting (rl, or critique.rl with the experiment's overrides), else the
        trainer's schema default ($defs/trainer)."""
        return section_setting(self.rl, "$defs", "trainer", key)

    # checkpoints -----------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.run_paths.state

    def state_key(self) -> dict:
        """What a resume state must match: the run's key (`Run.key`: its settings, rollout
        settings and spec) and its lr (a tuned one is no part of the key: a retuned rate starts
        over), with the settings the key hashes, to name what changed."""
        return {"key": self.record.key, "lr": self.lr, "identity": self.record.identity}

    def state_mismatch(self, st: dict) -> str | None:
        """Why resume state `st` is not this run's (None: it is)."""
        if st.get("key") == self.record.key and st.get("lr", self.lr) == self.lr:
            return None
        if st.get("key") != self.record.key:
            old = st.get("identity")
            what = (settings_diff(old, self.record.identity) if isinstance(old, dict)
                    else f"key {st.get('key')} -> {self.record.key}")
        else:
            what = f"lr {st.get('lr')} -> {self.lr}"
        return f"belongs to another setting of the run ({what})"

    # what `save_state` and `try_resume` add for this loop: the math loop's trained rollouts,
    # support buffer and warm-up rollouts (a trainer of another loop overrides both)
    resume_tag = "rl"

    def loop_state(self) -> dict:
        return {"harvest": self.harvest, "support": list(self.support.pairs),
                "warmup_rollouts": self.warmup_rollouts}

    def load_loop_state(self, st: dict) -> None:
        self.harvest = st["harvest"]
        self.support.extend(st["support"])
        self.warmup_rollouts = st.get("warmup_rollouts", 0)

    def save_state(self) -> None:
        """The resume state, atomically (a failed write names its cause and leaves no temp file);
        the state it replaces stays as ckpt/prev.pt, for a truncated last.pt to fall back on."""
        from sparserl.core.artifacts import save_checkpoint
        save_checkpoint({"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                         "rng": self.rng.bit_generator.state, "step": self.step, "metrics": self.metrics,
                         "calibration": self.calibration, **self.critic_state(), **self.loop_state(),
                         **self.state_key()}, self.state_file)
        self.write_metrics()

    def read_state(self) -> dict | None:
        """The resume state if it belongs to this setting (its key), with the model, optimiser,
        RNG, step and metrics restored from it; None to start over. A truncated or corrupt state
        falls back on ckpt/prev.pt, or stops with a message naming the file and how to start over
        (`core.artifacts.load_checkpoint`)."""
        from sparserl.core.artifacts import load_checkpoint
        tag = self.resume_tag
        st = load_checkpoint(self.state_file, what=f"the run {self.dir}", log=lambda m: self.log(f"[{tag}] {m}"))
        if st is None:
            return None
        why = self.state_mismatch(st)
        if why is not None:
            self.log(f"[{tag}] {self.state_file} {why}; starting over")
            return None
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.rng.bit_generator.state = st["rng"]
        self.step, self.metrics = st["step"], st["metrics"]
        return st

    def try_resume(self) -> bool:
        st = self.read_state()
        if st is None:
            return False
        self.calibration = st["calibration"]
        self.load_critic_state(st)
        self.load_loop_state(st)
        self.log(f"[{self.resume_tag}] resumed {self.dir} at step {self.step}/{self.steps}")
        return True

    def write_metrics(self) -> None:
        if self.metrics:
            extra = {"method": self.m.name, "seed": self.seed, "steps": self.steps,
                     "lr": self.lr, "lr_source": self.lr_source,
                     "verifier": None if self._ver is None else self._ver.timeout_counts()}
            write_table(pd.DataFrame(self.metrics), self.run_paths.metrics, cfg=self.cfg, extra=extra)
            write_table(pd.DataFrame(self.harvest), self.run_paths.rollouts, cfg=self.cfg,
                        extra={**extra, "policy": self.rl["policy"]})

    # the metric tags TensorBoard's HParams dashboard sets beside the hyperparameters
    HPARAM_METRICS = ("eval/accuracy", "reward_mean")

    def hparams(self) -> dict:
        """The run's hyperparameters, flattened: the method spec and the RL settings it trains with."""
        return flatten({"method": self.m.to_dict(), "rl": run_settings(self.rl, self.m), "seed": self.seed})

    def open_runlog(self) -> RunLog:
        """TensorBoard in the run's tensorboard/ dir (W&B too when enabled), with the hyperparameters.
        `purge_step` drops events past the resumed step, which a killed run logged and will log
        again."""
        return RunLog(self.cfg, self.run_paths.tensorboard, "/".join(self.dir.parts[-3:]),
                      hparams=self.hparams(), metrics=self.HPARAM_METRICS, purge_step=self.step + 1,
                      log=self.log)

    # sampling --------------------------------------------------------------------------------
    def _gen(self, idx: np.ndarray, n, salt: int) -> RolloutBatch:
        s = self.seed * 1_000_003 + self.step * 1009 + salt
        return rollout(self.backend, [self.prompts[i] for i in idx],
                       list(self.pool["answer"].iloc[idx]), n, self.params, s, self._ver)

    # advantages ------------------------------------------------------------------------------
    def advantages(self, sampled: Sampled, info: dict) -> np.ndarray:
        idx, batch = sampled.idx, sampled.batch
        # estimators group by integer codes (pool rows: one per prompt id), side data per rollout
        codes = np.asarray(idx, dtype=np.int64)[batch.prompt_index]
        step_ids = self.pool_ids[idx]
        side = SideData()
        if "prior" in self.m.needs:
            prior = sampled.prior
            if prior is None:  # fixed k: query the prior now (OSLA did before sampling)
                p = self.prior(list(step_ids))
                info["prior_mean"] = float(p.mean())
                prior = dict(zip(step_ids, p))
            side.prior = np.array([prior[pid] for pid in step_ids], dtype=np.float64)[batch.prompt_index]
        if "reference" in self.m.needs:
            side.phat = np.array([self.cached_phat[pid] for pid in step_ids],
                                 dtype=np.float64)[batch.prompt_index]
        est_info: dict = {}
        adv = advantages(self.m, batch.rewards, codes, side, self.calibration, info=est_info)
        info.update(flatten_info(est_info))
        return np.asarray(adv, dtype=np.float32)

    # the critic (Le Critique's methods) ------------------------------------------------------
    def critic_rows(self, sampled: Sampled, rewards: np.ndarray) -> tuple[list, list]:
        """Critic sequences of every rollout: prompt + privileged context + response. Privileged
        `answer`: the pool row's reference answer; `loo_group`: the other K-1 responses of the
        prompt and their rewards. A rollout is its own trajectory (single-turn)."""
        idx, b = sampled.idx, sampled.batch
        prompt_rows = [b.prompt_ids[b.prompt_index[i]] for i in range(len(b))]
        references = [str(a) for a in self.pool["answer"].iloc[idx]]
        return critic_rows(self.tok, self.m.critic.privileged, prompt_rows, b.response_ids, np.arange(len(b)),
                           b.prompt_index, references, b.texts, rewards)

    def critic_advantages(self, sampled: Sampled, info: dict, state: CalibrationState | None = None):
        """(token advantages (N, T), critic payload to push) of one batch, the critic read as it
        is (evaluate before train); `state`: Tether's carried rho, the run's unless given."""
        b = sampled.batch
        rewards = np.asarray(b.rewards, dtype=np.float64)
        # estimators group by integer codes (pool rows: one per prompt id), as `advantages` does
        codes = np.asarray(sampled.idx, dtype=np.int64)[b.prompt_index]
        seqs, starts = self.critic_rows(sampled, rewards)
        return evaluate_critic(self.m, self.critic, rewards, codes, np.arange(len(b)), seqs, starts,
                               b.response_lengths(), self.calibration if state is None else state, info,
                               self.response_length)

    def warmup_payload(self, salt: int, rng: np.random.Generator):
        """One warm-up batch (`CriticLoop.warmup`): a plain step's prompts drawn from the warm-up's
        own stream, rolled out by the start policy, evaluated with a fresh estimator state (Tether's
        rho starts at rho_0 with the policy)."""
        idx = rng.choice(len(self.pool_ids), self.n_prompts, replace=False)
        batch = self._gen(idx, self.m.group_size, salt)
        self.warmup_rollouts += len(batch)
        return self.critic_advantages(Sampled(idx, batch), {}, CalibrationState())[1]

    # update ----------------------------------------------------------------------------------
    def _micro_batches(self, rows: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        """A mini-batch's rows as micro-batches: `rl.length_chunks` of them, sorted by length (each
        pads to its own longest row: the same gradient for less compute), more where
        `rl.micro_batch_size` caps their size; one chunk keeps the rows' order."""
        chunks = max(int(self.setting("length_chunks")), -(-len(rows) // self.setting("micro_batch_size")))
        if chunks <= 1:
            return [rows]
        rows = rows[np.argsort(lengths[rows], kind="stable")]
        return [c for c in np.array_split(rows, min(chunks, len(rows))) if len(c)]

    def _old_logprobs(self, plan, seqs, plens) -> dict | None:
        """pi_old by row. In float32: None, the log-probs the rollout recorded (the same model's
        forward). Under bf16 matmuls the training forward gives them, as the papers' trainers
        recompute vLLM's: the first mini-batch's own forward (`update` fills those rows in, so its
        ratio is exactly 1), and the others' now, in the micro-batches they will train in."""
        if getattr(self.model, "matmul_dtype", None) is None:  # float32, or transformers' model
            return None
        old = {}
        with torch.no_grad():
            for _, micros in plan[1:]:
                for sl in micros:
                    lp, _ = token_logprobs(self.model, [seqs[i] for i in sl], [plens[i] for i in sl],
                                           self.tok.pad_token_id, share_prompts=self.share_prompts)
                    old.update((i, lp[j, :len(seqs[i]) - plens[i]]) for j, i in enumerate(sl))
        return old

    def update(self, batch: RolloutBatch, adv: np.ndarray, info: dict) -> None:
        m = self.m
        loss_fn = LOSSES[m.loss.type]
        lk = m.loss.options()
        seqs = [batch.prompt_ids[batch.prompt_index[i]] + list(batch.response_ids[i])
                for i in range(len(batch))]
        plens = [len(batch.prompt_ids[batch.prompt_index[i]]) for i in range(len(batch))]
        lengths = np.array([len(x) for x in seqs])
        stats = {"loss": 0.0, "clip_frac": 0.0, "entropy": 0.0, "kl": 0.0}
        # mini_batches > 1: several optimiser steps per rollout step (OpenRLHF's train batch <
        # rollout batch), so later ones are off-policy and the ratio, clip and GSPO matter
        n_mini = max(1, min(self.setting("mini_batches"), len(seqs)))
        order_rng = np.random.default_rng((self.seed, self.step))
        plans = [[(mini, self._micro_batches(mini, lengths))
                  for mini in np.array_split(order_rng.permutation(len(seqs)), n_mini)]
                 for _ in range(self.setting("ppo_epochs"))]
        recomputed = self._old_logprobs(plans[0], seqs, plens)
        self.model.train()
        grad_norms = []
        updates = 0
        for epoch, plan in enumerate(plans):
            for mini_no, (mini, micros) in enumerate(plan):
                self.opt.zero_grad(set_to_none=True)
                tokens_total = sum(len(seqs[i]) - plens[i] for i in mini)
                for sl in micros:
                    s_seqs, s_plens = [seqs[i] for i in sl], [plens[i] for i in sl]
                    logp, mask, ent = token_logprobs(self.model, s_seqs, s_plens, self.tok.pad_token_id,
                                                     with_entropy=True, share_prompts=self.share_prompts)
                    # pi_old: the behaviour policy's log-probs (recorded at rollout time, or recomputed)
                    if recomputed is not None and epoch == 0 and mini_no == 0:
                        recomputed.update((i, logp[j, :len(seqs[i]) - plens[i]].detach()) for j, i in enumerate(sl))
                    old = torch.zeros_like(logp)
                    for j, i in enumerate(sl):
                        lp = batch.logprobs[i] if recomputed is None else recomputed[i]
                        old[j, :len(lp)] = torch.as_tensor(lp)
                    a = torch.as_tensor(adv[sl])
                    loss, clip = loss_fn(logp, old, a, mask, **lk)
                    if self.step + 1 == int(os.environ.get(INJECT_NAN_ENV) or 0):
                        loss = loss * float("nan")
                    w = (mask.sum() / max(tokens_total, 1)).item() if lk.get("agg") == "token_mean" \
                        else len(sl) / len(mini)
                    total = loss * w
                    if self.ref_model is not None:
                        with torch.no_grad():
                            ref_lp, _ = token_logprobs(self.ref_model, s_seqs, s_plens, self.tok.pad_token_id,
                                                       share_prompts=self.share_prompts)
                        kl = ((kl_k3(logp, ref_lp) * mask).sum() / mask.sum().clamp(min=1))
                        total = total + m.kl_coef * kl * w
                        stats["kl"] += float(kl.detach()) * w
                    if not torch.isfinite(total.detach()):
                        raise self._nonfinite("loss", float(total.detach()), epoch, mini_no)
                    total.backward()
                    stats["loss"] += float(loss.detach()) * w
                    stats["clip_frac"] += float(clip) * w
                    stats["entropy"] += float((ent * mask).sum() / mask.sum().clamp(min=1)) * w
                gn = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0))
                if not np.isfinite(gn):  # clipping a NaN norm would step every weight to NaN
                    raise self._nonfinite("gradient norm", gn, epoch, mini_no)
                grad_norms.append(gn)
                self.opt.step()
                updates += 1
        for k in stats:
            stats[k] /= updates
        for name, p in self.model.named_parameters():
            if not torch.isfinite(p).all():
                raise self._nonfinite(f"weight {name}", float(p.detach()[~torch.isfinite(p.detach())][0]))
        gn = float(np.mean(grad_norms))
        info["grad_norm"] = gn
        info["optimizer_steps"] = updates
        info.update(stats)
        self.model.eval()

    _saved_step: int | None = None  # step of the last state saved by `run` (None: a loop that does not say)

    def _nonfinite(self, what: str, value: float, epoch: int | None = None, mini: int | None = None):
        """The NonFiniteError of the current step: where, and which checkpoint is the last finite one."""
        at = "" if epoch is None else f", epoch {epoch + 1} mini-batch {mini + 1}"
        if self._saved_step is None:
            kept = f"the last checkpoint {self.state_file}, if any, predates this step and is kept"
        elif self._saved_step:
            kept = (f"the last finite checkpoint, kept, is {self.state_file} (step {self._saved_step}); a "
                    "rerun resumes from it")
        else:
            kept = ("no checkpoint was saved before it (rl.checkpoint_every = "
                    f"{self.setting('checkpoint_every')}); a rerun starts from the start policy")
        return NonFiniteError(f"method '{self.m.name}' seed {self.seed}: non-finite {what} ({value}) at "
                              f"step {self.step + 1}/{self.steps}{at}; the run stops before it reaches the "
                              f"weights on disk, and {kept}. Fix the cause first (rl.lr, the method's loss "
                              f"settings in configs/methods/{self.m.name}.yaml, the rewards)")

    # loop ------------------------------------------------------------------------------------
    def run(self, stop_after: int | None = None) -> Path:
        if not self.try_resume():
            # intermediate checkpoints of an earlier setting must not reach this run's evaluation
            for stale in (self.run_paths.checkpoints, self.run_paths.eval_dir, self.run_paths.rollouts,
                          self.run_paths.tensorboard):
                shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
                manifest_path(stale).unlink(missing_ok=True)  # no manifest stays without its table
        self._saved_step = self.step  # the resumed state's step (0: none)
        every = self.setting("checkpoint_every")
        # evaluated snapshots, and those the BASIS value study reads (saving reads the model only)
        snaps = set(self.record.snapshot_steps) | set(self.record.study_steps)
        total_rollouts = int(sum(r["rollouts_generated"] for r in self.metrics))
        ov = self.m.overlong
        tb = self.open_runlog()
        bar = progress(self.steps, f"rl {self.m.name} s{self.seed}", logger=_log, every=1,
                       initial=self.step)
        with open_verifier(self.cfg) as self._ver, contextlib.ExitStack() as closing:
            closing.enter_context(tb)  # closed quietly when the run fails: its own error is the one shown
            closing.callback(bar.close)
            warmup_s = 0.0
            if self.critic is not None and self.step == 0:
                t0 = time.time()
                self.model.eval()
                self.warmup()
                warmup_s = time.time() - t0  # step 1's wall time holds it: the run's total is honest
            while self.step < self.steps:
                t0 = time.time() - warmup_s
                warmup_s = 0.0
                info: dict = {}
                self.model.eval()
                sampled = self.sampler.sample(info)
                idx, batch = sampled.idx, sampled.batch
                rewards = batch.rewards.astype(np.float32)
                raw = rewards.copy()
                if ov.enabled:
                    L = self.params.max_new_tokens
                    buf = max(1, int(round(ov.buffer_fraction * L)))
                    pen = overlong_penalty(batch.response_lengths(), L, buf, ov.penalty)
                    batch.rewards = rewards + pen.astype(np.float32)
                    info["overlong_penalty_mean"] = float(pen.mean())
                if self.critic is None:
                    adv = self.advantages(sampled, info)
                else:
                    adv, payload = self.critic_advantages(sampled, info)
                    self.train_critic(payload, info)
                    info["critic_warmup_updates"] = self.warmup_done
                    info["critic_warmup_rollouts"] = self.warmup_rollouts
                self.update(batch, adv, info)
                pids = self.pool_ids[idx][batch.prompt_index]
                self.support.extend(zip(pids.tolist(), raw.tolist()))
                k = np.bincount(batch.prompt_index, minlength=len(idx))
                total_rollouts += info["rollouts_generated"]
                self.step += 1
                lengths = batch.response_lengths()
                adv_tokens = token_values(adv, lengths)  # a token-level method's padding is no advantage
                self.harvest += [{"prompt_id": p, "step": self.step, "reward": float(r), "length": int(n)}
                                 for p, r, n in zip(pids.tolist(), raw.tolist(), lengths.tolist())]
                row = {"step": self.step, "reward_mean": float(raw.mean()),
                       "response_len_mean": float(lengths.mean()),
                       "prompts": len(idx), "rollouts_trained": len(batch),
                       "rollouts_per_prompt_mean": float(k.mean()),
                       "rollouts_per_prompt_min": int(k.min()), "rollouts_per_prompt_max": int(k.max()),
                       "rollouts_total": total_rollouts,
                       "zero_adv_frac": float(np.mean(np.abs(adv_tokens) < 1e-8)),
                       "adv_abs_mean": float(np.abs(adv_tokens).mean()),
                       "support_size": len(self.support), "wall_time_s": time.time() - t0,
                       "lr": self.lr, "lr_source": self.lr_source, **info}
                self.metrics.append(row)
                tb.scalars(row, self.step)
                bar.set_postfix_str(f"reward {row['reward_mean']:.3f} rollouts {len(batch)} "
                                    f"gn {row['grad_norm']:.3f}")
                bar.update(1)
                if self.step in snaps:
                    self._save_hf(self.run_paths.checkpoint(self.step))
                if self.step % every == 0 or self.step == self.steps:
                    self.save_state()
                    self._saved_step = self.step
                if stop_after is not None and self.step >= stop_after and self.step < self.steps:
                    raise KilledForTest(f"stopped after step {self.step}")
        self._save_hf(self.run_paths.final)
        self.write_metrics()
        # the state only serves a killed run; a finished run asked again starts over
        shutil.rmtree(self.state_file.parent, ignore_errors=True)
        return self.dir

    def _save_hf(self, out: Path) -> None:
        from sparserl.models.policies import save_hf
        save_hf(self.model, self.tok, out, {"method": self.m.name, "seed": self.seed,
                                             "step": self.step, "scale": self.cfg["scale"],
                                             "rl_policy": self.rl["policy"]})


def train(cfg: dict, method: str, seed: int, threads: int = 1, stop_after: int | None = None,
          log=_log.info) -> Path:
    """The RL run of `method` at `seed` (rl/<owner>/seed<s>, `resolve_run`), trained or resumed."""
    from sparserl.methods.run import resolve_run
    return Trainer(cfg, resolve_run(cfg, method, seed), threads=threads, log=log).run(stop_after=stop_after)
