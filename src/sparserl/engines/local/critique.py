"""Le Critique's RL loop on the local engine: an env, K rollouts per problem, a critic.

    warm-up (critic methods): `warmup_updates` value updates on rollouts of the start policy
    for step:
        sample problems                         (rollouts_per_step / K of them, or prompts_per_step)
        play K episodes of each                 (single-turn: one generation; Sudoku: one per turn)
        values of every response token          (the critic as it is now: evaluate before train)
        advantages from the methods layer       (trajectory level: Mean, VF/Pvf GAE, Tether, EVPO)
        push the batch into the critic's replay, one value update
        policy update                           (the math trainer's `Trainer.update`, token advantages;
                                                 a KL term to policy c where the method sets kl_coef)
    held-out reward of the final policy

A multi-turn episode trains as one row per turn (the turn's observation is its prompt); its
tokens are concatenated per trajectory for the estimators, so a group is K trajectories and GAE,
Tether's rho and the EV run over the trajectory's tokens. Paper: Le Critique Sections 4-7, App. B.
The critic's part of the step (critic rows, values, advantages, targets, replay, warm-up) is
`critic_loop`'s, which the math trainer runs too.
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.config import section_setting
from sparserl.core.artifacts import atomic_write_text, manifest_path, write_table
from sparserl.core.logs import get_logger, progress
from sparserl.core.runlog import flatten
from sparserl.engines.local.critic_loop import (critic_rows, evaluate_critic, make_critic, to_rows,  # noqa: F401
                                                to_trajectories, with_critic_lr)
from sparserl.engines.local.trainer import Trainer, load_policy
from sparserl.envs import make_env
from sparserl.envs.world import critique_cfg, experiment, heldout_eval
from sparserl.methods.sidedata import CalibrationState, SideData, advantages
from sparserl.methods.run import resolve_critique_run
from sparserl.rollout import SamplingParams, make_live_backend
from sparserl.rollout.base import RolloutBatch

_log = get_logger(__name__)


@dataclasses.dataclass
class Episodes:
    """K episodes of each of P problems, as turn rows (`rows`) and trajectories."""
    rows: RolloutBatch  # one row per turn; row r's prompt is rows.prompts[r] (its observation)
    traj: np.ndarray  # trajectory of each row (turns in order)
    problem: np.ndarray  # problem index (into the step's problems) of each trajectory
    rewards: np.ndarray  # reward of each trajectory
    texts: list  # each trajectory's responses joined (the LOO group's context)


def play(env, backend, problems, k: int, params: SamplingParams, seed: int) -> Episodes:
    """Run k episodes per problem; single-turn envs generate once and score the batch."""
    if not env.multi_turn:
        b = backend.generate([p.prompt for p in problems], k, params, seed)
        pi = b.prompt_index
        b.rewards = np.asarray(env.score([problems[i] for i in pi], b.texts), dtype=np.float32)
        rows = RolloutBatch(prompts=[b.prompts[i] for i in pi], prompt_ids=[b.prompt_ids[i] for i in pi],
                            prompt_index=np.arange(len(b)), response_ids=b.response_ids, logprobs=b.logprobs,
                            texts=b.texts, finish_reason=b.finish_reason, rewards=b.rewards)
        return Episodes(rows, np.arange(len(b)), pi.astype(np.int64), b.rewards.astype(np.float64), list(b.texts))
    problem = np.repeat(np.arange(len(problems)), k)
    states = [env.reset(problems[i]) for i in problem]
    done = np.zeros(len(states), bool)
    rewards = np.zeros(len(states))
    texts: list[list[str]] = [[] for _ in states]
    parts, traj = [], []
    for turn in range(env.max_turns):
        live = np.flatnonzero(~done)
        if not len(live):
            break
        b = backend.generate([env.observe(states[j]) for j in live], 1, params, seed + 7919 * turn)
        for r, j in enumerate(live):
            states[j], d, rew = env.step(states[j], b.texts[r])
            texts[j].append(b.texts[r])
            done[j], rewards[j] = d, rew if d else 0.0
        parts.append(b)
        traj.append(live)
    prompts = [p for b in parts for p in b.prompts]
    rows = RolloutBatch(prompts=prompts, prompt_ids=[x for b in parts for x in b.prompt_ids],
                        prompt_index=np.arange(len(prompts)),
                        response_ids=[x for b in parts for x in b.response_ids],
                        logprobs=[x for b in parts for x in b.logprobs], texts=[x for b in parts for x in b.texts],
                        finish_reason=[x for b in parts for x in b.finish_reason])
    tr = np.concatenate(traj)
    rows.rewards = rewards[tr].astype(np.float32)
    # rows sorted by trajectory, turns in order (a stable sort keeps the turn order)
    order = np.argsort(tr, kind="stable")
    rows = _take_rows(rows, order)
    return Episodes(rows, tr[order], problem, rewards, [" |".join(t) for t in texts])


def _take_rows(b: RolloutBatch, order) -> RolloutBatch:
    o = list(map(int, order))
    return RolloutBatch(prompts=[b.prompts[i] for i in o], prompt_ids=[b.prompt_ids[i] for i in o],
                        prompt_index=np.arange(len(o)), response_ids=[b.response_ids[i] for i in o],
                        logprobs=[b.logprobs[i] for i in o], texts=[b.texts[i] for i in o],
                        finish_reason=[b.finish_reason[i] for i in o], rewards=b.rewards[o])


class CritiqueTrainer(Trainer):
    """One Le Critique run (experiment x method x seed). Reuses the math trainer's policy update
    (`Trainer.update`: loss, mini-batches, grad clip) and the critic loop both share
    (`critic_loop.CriticLoop`: warm-up, replay pushes and updates); the envs' episodes are this loop's.
    It is built by `Trainer.__init__` from `methods.run.resolve_critique_run`'s run (the method with
    the experiment's K and the scale's critic lr, its settings, folder and key), in the same order,
    through the hooks below: the experiment, its env and problems."""

    # construction hooks (`Trainer.__init__`) -------------------------------------------------
    def setup_task(self) -> tuple[str, str]:
        """The experiment, its settings (critique.rl with its own overrides), its env and the env's
        training problems; the start policy c (the run's input), on the CPU engine."""
        c = critique_cfg(self.cfg)
        self.exp = experiment(self.cfg, self.record.experiment)
        self.rl = self.record.settings
        env_spec = c["envs"][self.exp.env]
        self.env = make_env(env_spec["kind"], env_spec, self.cfg["seed"])
        self.pool = self.env.problems("rl", int(self.rl["pool"]))
        return str(self.record.reads.policy), "cpu"

    def setup_generation(self) -> None:
        self.max_new = int(self.rl["max_new_tokens"])
        self.params = sampling_params(self.rl)
        self.response_length = self.max_new * self.env.max_turns  # a trajectory's longest

    def setup_sampler(self) -> None:
        """Nothing: this loop draws its problems itself (`_episodes`)."""

    # checkpoints (`Trainer.save_state` / `try_resume`, keyed by `state_key`: the run's key and lr)
    resume_tag = "critique"

    def loop_state(self) -> dict:
        """Nothing beyond the common state: this loop keeps no rollouts, support buffer or warm-up rollouts."""
        return {}

    def load_loop_state(self, st: dict) -> None:
        pass

    def write_metrics(self) -> None:
        if self.metrics:
            write_table(pd.DataFrame(self.metrics), self.run_paths.metrics, cfg=self.cfg,
                        extra={"experiment": self.exp.name, "env": self.exp.env, "k": self.exp.k,
                               "method": self.m.name, "seed": self.seed, "steps": self.steps,
                               "isolation": getattr(self.env, "sandbox_isolation", None)})  # codeio's sandbox level

    def _save_hf(self, out) -> None:
        from sparserl.models.policies import save_hf
        save_hf(self.model, self.tok, out, {"method": self.m.name, "seed": self.seed, "step": self.step,
                                             "scale": self.cfg["scale"], "experiment": self.exp.name,
                                             "env": self.exp.env, "k": self.exp.k})

    # one batch -----------------------------------------------------------------------------
    def _episodes(self, salt: int, rng: np.random.Generator | None = None) -> tuple[list, Episodes]:
        idx = (rng or self.rng).choice(len(self.pool), size=min(self.n_prompts, len(self.pool)), replace=False)
        problems = [self.pool[i] for i in idx]
        s = self.seed * 1_000_003 + self.step * 1009 + salt
        return problems, play(self.env, self.backend, problems, self.exp.k, self.params, s)

    def critic_rows(self, problems, ep: Episodes):
        """Critic sequences of every row: prompt + privileged context + response (`critic_inputs`);
        the reference context is the problem's `privileged` (the answer, Sudoku's solved grid)."""
        return critic_rows(self.tok, self.m.critic.privileged, ep.rows.prompt_ids, ep.rows.response_ids,
                           ep.traj, ep.problem, [p.privileged for p in problems], ep.texts, ep.rewards)

    def evaluate_batch(self, problems, ep: Episodes, info: dict, state: CalibrationState | None = None):
        """(row advantages, critic payload to push) for one batch; the critic is read, not trained.
        `state`: the estimator's carried state (Tether's rho), the run's unless given."""
        state = self.calibration if state is None else state
        if self.critic is None:
            adv_t = advantages(self.m, ep.rewards, ep.problem, SideData(), state, info=info)
            return np.asarray(adv_t, dtype=np.float32)[ep.traj], None
        seqs, starts = self.critic_rows(problems, ep)
        return evaluate_critic(self.m, self.critic, ep.rewards, ep.problem, ep.traj, seqs, starts,
                               ep.rows.response_lengths(), state, info, self.response_length)

    def warmup_payload(self, salt: int, rng: np.random.Generator):
        """One warm-up batch (`CriticLoop.warmup`): episodes of the start policy on the warm-up's
        prompt stream, evaluated; warm-up advantages train nothing, so Tether's rho starts at rho_0
        with the policy."""
        problems, ep = self._episodes(salt=salt, rng=rng)
        return self.evaluate_batch(problems, ep, {}, CalibrationState())[1]

    # loop ----------------------------------------------------------------------------------
    HPARAM_METRICS = ("eval/heldout_reward", "reward_mean")

    def hparams(self) -> dict:
        """The run's hyperparameters, flattened: the method spec (K from the experiment), the
        experiment's RL settings, its env and K."""
        return flatten({"method": self.m.to_dict(), "rl": self.rl, "experiment": self.exp.name,
                        "env": self.exp.env, "k": self.exp.k, "seed": self.seed})

    def run(self, stop_after: int | None = None):
        if not self.try_resume():
            for stale in (self.run_paths.final, self.run_paths.metrics, self.run_paths.dir / "summary.json",
                          self.run_paths.tensorboard):
                shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
                manifest_path(stale).unlink(missing_ok=True)  # no manifest stays without its table
        with self.open_runlog() as tb:
            return self._run(tb, stop_after)

    def _run(self, tb, stop_after: int | None):
        every = int(section_setting(self.rl, "$defs", "trainer", "checkpoint_every"))
        bar = progress(self.steps, f"critique {self.exp.name} {self.m.name} s{self.seed}", logger=_log,
                       every=5, initial=self.step)
        self.model.eval()
        if self.critic is not None and self.step == 0:
            self.warmup()
        total = int(sum(r["rollouts"] for r in self.metrics))
        while self.step < self.steps:
            t0 = time.time()
            info: dict = {}
            self.model.eval()
            problems, ep = self._episodes(salt=0)
            adv, payload = self.evaluate_batch(problems, ep, info)
            if payload is not None:
                self.train_critic(payload, info)
            self.update(ep.rows, adv, info)
            self.step += 1
            total += len(ep.rewards)
            row = {"step": self.step, "reward_mean": float(ep.rewards.mean()), "rollouts": len(ep.rewards),
                   "rollouts_total": total, "turns_mean": len(ep.rows) / len(ep.rewards),
                   "response_len_mean": float(ep.rows.response_lengths().mean()),
                   "adv_abs_mean": float(np.abs(adv).mean()), "wall_time_s": time.time() - t0, **info}
            self.metrics.append(row)
            tb.scalars(row, self.step)
            bar.set_postfix_str(f"reward {row['reward_mean']:.3f}")
            bar.update(1)
            if self.step % every == 0 or self.step == self.steps:
                self.save_state()
            if stop_after is not None and self.step >= stop_after and self.step < self.steps:
                bar.close()
                raise KilledForTest(f"stopped after step {self.step}")
        bar.close()
        summary = {"experiment": self.exp.name, "env": self.exp.env, "k": self.exp.k, "method": self.m.name,
                   "seed": self.seed, "steps": self.steps,
                   "warmup_updates": self.warmup_done, "rollouts_total": total,
                   "heldout_reward": heldout_reward(self.env, self.backend, self.rl, self.seed)}
        tb.evaluation({"eval/heldout_reward": summary["heldout_reward"]}, self.step)
        self.write_metrics()
        self._save_hf(self.run_paths.final)
        atomic_write_text(self.run_paths.dir / "summary.json", pd.Series(summary).to_json(indent=1) + "\n")
        shutil.rmtree(self.state_file.parent, ignore_errors=True)
        self.env.close()
        return self.dir


class KilledForTest(RuntimeError):
    """`CritiqueTrainer.run(stop_after=k)` simulates a kill after k steps."""


def sampling_params(rl: dict) -> SamplingParams:
    """The rollouts' sampling, in training and in evaluation: T from `rl.temperature`, no nucleus."""
    return SamplingParams(temperature=float(section_setting(rl, "$defs", "trainer", "temperature")), top_p=1.0,
                          max_new_tokens=int(rl["max_new_tokens"]))


def heldout_reward(env, backend, rl: dict, seed: int = 0) -> float:
    """Mean reward on the env's held-out problems (`rl.eval`: problems x samples), `rl` the run's
    settings (critique.rl with its experiment's overrides)."""
    n_problems, k = heldout_eval(rl)
    problems = env.problems("eval", n_problems)
    ep = play(env, backend, problems, k, sampling_params(rl), seed=424_242)
    return float(ep.rewards.mean())


def start_reward(cfg: dict, env_name: str, policy: str | Path) -> dict:
    """Held-out reward of the start policy c (its checkpoint dir `policy`) on one env (the runs'
    common starting point)."""
    c = critique_cfg(cfg)
    env = make_env(c["envs"][env_name]["kind"], c["envs"][env_name], cfg["seed"])
    model, tok = load_policy(str(policy), "cpu")
    backend = make_live_backend(cfg, model, tok)
    try:
        rl = critique_cfg(cfg)["rl"]
        return {"env": env_name, "heldout_reward": heldout_reward(env, backend, rl),
                "train_pool_reward": _pool_reward(env, backend, rl)}
    finally:
        env.close()


def _pool_reward(env, backend, rl: dict) -> float:
    problems = env.problems("rl", min(int(rl["pool"]), 256))
    return float(play(env, backend, problems, 4, sampling_params(rl), seed=171_717).rewards.mean())


def train(cfg: dict, exp: str, method: str, seed: int, threads: int = 1, stop_after: int | None = None,
          run_dir: str | Path | None = None, policy: str | Path | None = None):
    """Le Critique's run of `method` on experiment `exp` at `seed`, trained or resumed, in `run_dir`
    from `policy` (the DAG's paths; else `CritiquePaths`')."""
    run = resolve_critique_run(cfg, exp, method, seed, root=run_dir, policy=policy)
    return CritiqueTrainer(cfg, run, threads=threads).run(stop_after=stop_after)
