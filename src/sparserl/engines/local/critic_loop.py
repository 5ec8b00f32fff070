"""Le Critique's critic inside a local RL loop, shared by the math trainer (`trainer.Trainer`, every
critic method of `rl.methods`) and Le Critique's own loop (`critique.CritiqueTrainer`, its envs).

One step of a critic method, in both (Le Critique Sections 4-5, Appendix B):

    critic rows      prompt + privileged context + response of every row (`critic_rows`)
    values           the critic as it is now reads every response token (B.1: evaluate before train)
    advantages       the methods layer's token-level estimator (VF/Pvf GAE, Tether's rho, EVPO) on
                     the trajectories' tokens, with the values and the mask as side data
    targets          Monte Carlo (lambda_target = 1: every token's target is R) or lambda-returns
    push + update    the evaluated rows enter the FIFO replay, `updates_per_step` value updates

and before the first policy update, `warmup_updates` value updates (B.3) on batches of the start
policy (`CriticLoop.warmup`), each evaluated before it is pushed, as in training.

A row is one generation (a turn); a trajectory is one episode (single-turn: the row itself). The
estimators run over trajectories (`to_trajectories`) and their advantages go back to rows
(`to_rows`), so a multi-turn episode's GAE, rho and EV span all its turns.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from sparserl.core.config import section_setting
from sparserl.engines.local.adamw import AdamW
from sparserl.estimators.gae import gae, terminal_rewards
from sparserl.estimators.tether import explained_variance
from sparserl.methods.sidedata import CalibrationState, SideData, advantages, flatten_info
from sparserl.methods.spec import with_critic_lr  # noqa: F401  (the trainers import it from here)
from sparserl.values.critic import Critic
from sparserl.values.critic_inputs import privileged_context

# the warm-up's own prompt stream (np.random.default_rng((seed, WARMUP_STREAM))): step 1 then
# draws the same prompts for every method of a seed, critic or not
WARMUP_STREAM = 0x3A4
WARMUP_SALT = 500_000  # generation seeds of warm-up batch j: the trainer's seed formula + 500_000 + j


def make_critic(model, method, pad_id: int, seed: int, rl: dict) -> Critic:
    """The run's critic: a copy of the policy `model` with a new head (B.3), value batches of one
    step's rollouts (`rl.rollouts_per_step`), the trainer's micro-batch, length chunks and prompt sharing, and
    AdamW without decay."""
    return Critic(model, method.critic, pad_id, seed, batch_size=int(rl["rollouts_per_step"]),
                  micro_batch=int(section_setting(rl, "$defs", "trainer", "micro_batch_size")),
                  length_chunks=int(section_setting(rl, "$defs", "trainer", "length_chunks")),
                  share_prompts=bool(section_setting(rl, "$defs", "trainer", "share_prompts")),
                  optimizer=lambda params, lr: AdamW(params, lr=lr, weight_decay=0.0))


def to_trajectories(row_values: np.ndarray, row_lengths: np.ndarray, traj: np.ndarray, n_traj: int):
    """Row token arrays (R, T) -> trajectory arrays (N, sum of its rows' lengths), with the mask and
    each row's (trajectory, offset) so `to_rows` can split them back."""
    lens = np.bincount(traj, weights=row_lengths, minlength=n_traj).astype(int)
    T = max(1, int(lens.max()) if len(lens) else 1)
    out = np.zeros((n_traj, T))
    mask = np.zeros((n_traj, T), bool)
    offset = np.zeros(len(traj), int)
    fill = np.zeros(n_traj, int)
    for r, (j, L) in enumerate(zip(traj, row_lengths)):
        offset[r] = fill[j]
        out[j, fill[j]:fill[j] + L] = row_values[r, :L]
        mask[j, fill[j]:fill[j] + L] = True
        fill[j] += L
    return out, mask, offset


def to_rows(traj_values: np.ndarray, traj: np.ndarray, offset: np.ndarray, row_lengths: np.ndarray) -> np.ndarray:
    T = max(1, int(row_lengths.max()))
    out = np.zeros((len(traj), T))
    for r, (j, o, L) in enumerate(zip(traj, offset, row_lengths)):
        out[r, :L] = traj_values[j, o:o + L]
    return out


def critic_rows(tok, kind: str, prompt_ids: Sequence, response_ids: Sequence, traj: np.ndarray,
                problem: np.ndarray, references: Sequence[str], texts: Sequence[str],
                rewards: Sequence[float]) -> tuple[list, list]:
    """Critic sequences and value starts of every row: prompt + privileged context + response
    (`values.critic_inputs`; the value of response token t sits at start + t).

    prompt_ids / response_ids: per row; traj: each row's trajectory; problem: each trajectory's
    problem (its group); references: each problem's reference context (`privileged: answer`);
    texts / rewards: each trajectory's response text and reward (`privileged: loo_group`: the
    other K-1 of its group)."""
    seqs, starts = [], []
    groups: dict[int, list[int]] = {}
    for j, p in enumerate(problem):
        groups.setdefault(int(p), []).append(j)
    cache: dict[int, list[int]] = {}
    for r in range(len(prompt_ids)):
        j = int(traj[r])
        if j not in cache:
            g = groups[int(problem[j])]
            text = privileged_context(kind, references[problem[j]], [texts[x] for x in g],
                                      [rewards[x] for x in g], g.index(j))
            cache[j] = tok(text, add_special_tokens=False)["input_ids"] if text else []
        priv = cache[j]
        p_ids = list(prompt_ids[r])
        seqs.append(p_ids + priv + list(response_ids[r]))
        starts.append(len(p_ids) + len(priv) - 1)
    return seqs, starts


def evaluate_critic(method, critic: Critic, rewards: np.ndarray, codes: np.ndarray, traj: np.ndarray,
                    seqs: list, starts: list, lengths: np.ndarray, state: CalibrationState | None,
                    info: dict, response_length: int):
    """(row advantages (R, T) float32, critic payload to push) of one evaluated batch; the critic
    is read, not trained. rewards / codes: per trajectory (codes group them: one per problem);
    `state`: the estimator's carried state (Tether's rho). Adds the estimator's diagnostics, the
    critic's explained variance on the batch (`critic_ev`) and its mean value to `info`."""
    n = len(rewards)
    v_rows = critic.values(seqs, starts, list(lengths))
    V, mask, offset = to_trajectories(v_rows, lengths, traj, n)
    est: dict = {}
    adv = advantages(method, rewards, codes, SideData(values=V, mask=mask), state,
                     info=est, response_length=response_length)
    info.update(flatten_info({k: v for k, v in est.items() if k != "returns"}))
    info["critic_ev"] = explained_variance(rewards[:, None], V, mask)
    info["critic_value_mean"] = float(V[mask].mean()) if mask.any() else float("nan")
    lam_t = float(method.critic.lam_target)
    if lam_t >= 1.0:
        tgt = np.where(mask, rewards[:, None], 0.0)  # Monte Carlo: every token's target is R
    else:
        _, tgt = gae(terminal_rewards(rewards, mask), V, mask, 1.0, lam_t)
    t_rows = to_rows(np.clip(tgt, 0.0, 1.0), traj, offset, lengths)
    payload = (seqs, starts, [t_rows[r, :lengths[r]] for r in range(len(seqs))])
    return to_rows(adv, traj, offset, lengths).astype(np.float32), payload


def token_values(adv: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The advantages of real response tokens: (R, T) token advantages without the padding past
    each row's length; one advantage per row as it is."""
    adv = np.asarray(adv)
    if adv.ndim == 1:
        return adv
    return adv[np.arange(adv.shape[1])[None] < np.asarray(lengths)[:, None]]


class CriticLoop:
    """The critic's share of a trainer's state and loop. The trainer sets `m` (its method spec),
    `critic` (a `Critic`, or None without one), `seed` and `warmup_done`, and implements
    `warmup_payload(salt, rng)`: one batch of the start policy, evaluated, as a push payload."""

    critic: Critic | None
    warmup_done: int

    def warmup_payload(self, salt: int, rng: np.random.Generator):
        raise NotImplementedError

    def warmup(self, bar=None) -> None:
        """`warmup_updates` value updates before the first policy update (Appendix B.3), on
        batches of the start policy, each batch evaluated before it is pushed (as in training);
        a new batch when the replay is empty (each is used `replay_reuse` times)."""
        w = int(self.m.critic.warmup_updates)
        salt = 0
        # its own prompt stream: step 1 then draws the same prompts for every method of a seed
        rng = np.random.default_rng((self.seed, WARMUP_STREAM))
        while self.warmup_done < w:
            if not self.critic.replay:
                self.critic.push(*self.warmup_payload(WARMUP_SALT + salt, rng))
                salt += 1
            self.critic.update()
            self.warmup_done += 1

    def train_critic(self, payload, info: dict) -> None:
        """After the batch's values were read: push it, then the step's value updates."""
        self.critic.push(*payload)
        for _ in range(int(self.m.critic.updates_per_step)):
            info.update(self.critic.update() or {})

    def critic_state(self) -> dict:
        return {"warmup_done": self.warmup_done,
                "critic": None if self.critic is None else self.critic.state_dict()}

    def load_critic_state(self, st: dict) -> None:
        self.warmup_done = st.get("warmup_done", 0)
        if self.critic is not None:
            self.critic.load_state_dict(st["critic"])
