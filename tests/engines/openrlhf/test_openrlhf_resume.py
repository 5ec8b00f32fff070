"""A killed-and-retried OpenRLHF run writes the artifacts of an uninterrupted one: the harvest keeps
its rows up to the checkpoint the run resumes from and the step counter continues after it, later
TensorBoard sessions replace the steps they log again, and a checkpoint a kill left incomplete is
not resumed. OpenRLHF's real classes on CPU (tests/openrlhf_stubs.py), no Ray or vLLM.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import openrlhf_stubs

openrlhf_stubs.skip_without_openrlhf()
pytestmark = pytest.mark.usefixtures("orl", "no_ray")  # tests/engines/openrlhf/conftest.py

import torch  # noqa: E402


class _ActorGroup:
    """`RayActorGroup` stand-in: `get_checkpoint_states` answers what the actors loaded."""

    def __init__(self, states):
        self.states, self.calls = states, []

    def async_run_method(self, method_name):
        self.calls.append(method_name)
        return [self.states]


def _maker(orl, run_dir: Path, *, load_enable: bool, loaded_step: int | None):
    """A GRPO experience maker as OpenRLHF's PPOTrainer holds it, built the way OpenRLHF's own tests
    build it (__new__ plus an args namespace); `loaded_step` is the global_step of the DeepSpeed
    checkpoint the actor group loaded (None: no checkpoint folder)."""
    cls = orl.plugin_exp.SparseRLExperienceMaker
    ckpt = run_dir / "ckpt"
    if loaded_step is not None:
        (ckpt / "_actor").mkdir(parents=True, exist_ok=True)
    m = cls.__new__(cls)
    m.advantage_estimator = "grpo"
    m.kl_ctl = SimpleNamespace(value=0.0)
    m.actor_model_group = _ActorGroup({} if loaded_step is None else
                                      {"episode": 0, "global_step": loaded_step, "total_consumed_prompts": 0})
    m.strategy = SimpleNamespace(args=SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=4, max_new_tokens=8),
        reward=SimpleNamespace(clip_range=(-10, 10)),
        data=SimpleNamespace(max_len=64),
        algo=SimpleNamespace(advantage=SimpleNamespace(estimator="grpo")),
        ckpt=SimpleNamespace(load_enable=load_enable, path=str(ckpt)),
        sparserl=SimpleNamespace(spec=None, run_dir=str(run_dir)),
    ))
    return m


def _step_batch(orl, seed: int, uids=None, phat=None):
    """One step's experiences: 8 rollouts (default: 2 prompts x 4), rewards and lengths drawn from
    `seed`; `phat(uid)` adds a reference pass rate to each label."""
    from sparserl.engines.openrlhf.labels import encode_label
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 2, size=8).astype(float)
    lengths = rng.integers(1, 6, size=8)
    mask = torch.arange(6)[None, :] < torch.from_numpy(lengths)[:, None]
    uids = uids or [f"q{seed}a"] * 4 + [f"q{seed}b"] * 4
    side = (lambda u: {"phat": phat(u)}) if phat else (lambda u: {})
    return [orl.exp.Experience(
        rewards=torch.tensor(rewards), action_mask=mask, kl=torch.zeros(8, 6),
        prompts=[f"prompt {u}" for u in uids], labels=[encode_label(u, "1", **side(u)) for u in uids],
        response_length=torch.tensor(lengths, dtype=torch.float32), info={})]


def _harvest(run_dir: Path):
    from sparserl.engines.openrlhf.metrics import harvested_rollouts
    return harvested_rollouts(run_dir / "openrlhf")


def test_resumed_run_harvests_what_an_uninterrupted_run_does(orl, tmp_path):
    """Steps 1-4 uninterrupted; against: killed after step 3 with a checkpoint at step 2, retried.
    The retry's step 3 differs from the killed run's (nondeterminism): the killed run's step-3
    rows must go, its steps 1-2 stay, and the retry's rows are numbered 3 and 4."""
    whole = _maker(orl, tmp_path / "whole", load_enable=True, loaded_step=None)
    for s in (1, 2, 3, 4):
        whole.compute_advantages_and_returns(_step_batch(orl, s))

    killed = _maker(orl, tmp_path / "retried", load_enable=True, loaded_step=None)
    for s in (1, 2, 33):  # 33: the killed run's own step 3
        killed.compute_advantages_and_returns(_step_batch(orl, s))
    retry = _maker(orl, tmp_path / "retried", load_enable=True, loaded_step=2)
    for s in (3, 4):
        retry.compute_advantages_and_returns(_step_batch(orl, s))

    assert retry.actor_model_group.calls == ["get_checkpoint_states"] and retry._step == 4
    got, want = _harvest(tmp_path / "retried"), _harvest(tmp_path / "whole")
    assert got["step"].tolist() == [1] * 8 + [2] * 8 + [3] * 8 + [4] * 8
    assert got.equals(want)


def test_start_without_a_resume_drops_every_earlier_row(orl, tmp_path):
    """A run that starts over (no --ckpt.load_enable, or no checkpoint yet) keeps no row of the
    attempt before it, and counts from step 1."""
    old = _maker(orl, tmp_path, load_enable=True, loaded_step=None)
    for s in (1, 2):
        old.compute_advantages_and_returns(_step_batch(orl, s))
    critic_like = _maker(orl, tmp_path, load_enable=False, loaded_step=5)  # a checkpoint exists, unused
    critic_like.compute_advantages_and_returns(_step_batch(orl, 7))
    got = _harvest(tmp_path)
    assert critic_like.actor_model_group.calls == []
    assert got["step"].tolist() == [1] * 8 and got["prompt_id"].str.startswith("q7").all()


def _events(path: Path, points, t0: float):
    """One TensorBoard session (one event file, as one OpenRLHF process writes) in `path`."""
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(log_dir=str(path))
    for i, (tag, step, value) in enumerate(points):
        w.add_scalar(tag, value, step, walltime=t0 + i)
    w.close()


def test_tensorboard_resumed_session_replaces_the_steps_it_logs_again(tmp_path):
    """The killed session logged steps 1-4 (its step 4 twice, the later value counts); the resumed
    one (same folder, a new event file) logs 3-5: steps 3 on are the resumed session's alone, a
    tag only the killed session logged at step 4 included."""
    from sparserl.engines.openrlhf.metrics import metrics_from_tensorboard
    run = tmp_path / "tb" / "grpo_seed0"
    killed = [("train/rollout/reward_mean", s, 0.1 * s) for s in (1, 2, 3, 4)]
    _events(run, killed + [("train/rollout/reward_mean", 4, 0.45), ("train/kl", 4, 9.0), ("train/kl", 2, 2.0)],
            t0=1000.0)
    _events(run, [("train/rollout/reward_mean", s, 1.0 + s) for s in (3, 4, 5)], t0=2000.0)
    df = metrics_from_tensorboard(tmp_path / "tb").set_index("step")
    assert df.index.tolist() == [1, 2, 3, 4, 5]
    assert df["reward_mean"].tolist() == pytest.approx([0.1, 0.2, 4.0, 5.0, 6.0])
    assert df["kl"].iloc[1] == 2.0 and df["kl"].drop(index=2).isna().all()


def test_tensorboard_run_started_over_replaces_everything(tmp_path):
    from sparserl.engines.openrlhf.metrics import metrics_from_tensorboard
    run = tmp_path / "tb" / "x"
    _events(run, [("train/rollout/reward_mean", s, 0.5) for s in (1, 2, 3)] + [("eval/acc", 3, 0.7)], t0=10.0)
    _events(run, [("train/rollout/reward_mean", s, 0.25) for s in (1, 2)] + [("train/entropy_loss", 2, 1.5)], t0=20.0)
    df = metrics_from_tensorboard(tmp_path / "tb")
    assert df["step"].tolist() == [1, 2] and df["reward_mean"].tolist() == [0.25, 0.25]
    assert df["entropy"].iloc[1] == 1.5  # --actor.entropy_coef 0 logs the entropy as entropy_loss
    assert "eval_acc" not in df.columns


def _ds_checkpoint(actor: Path, tag: str, *, latest: str | None, files=("mp_rank_00_model_states.pt",)):
    (actor / tag).mkdir(parents=True, exist_ok=True)
    for f in files:
        (actor / tag / f).write_bytes(b"x")
    if latest is not None:
        (actor / "latest").write_text(latest)


@pytest.mark.parametrize("tag,latest,files,step", [
    ("global_step4", "global_step4", ("zero_pp_rank_0_mp_rank_00_model_states.pt",), 4),  # ZeRO-3's name
    ("best_global_step6", "best_global_step6", ("mp_rank_00_model_states.pt",), 6),
    ("global_step8", None, ("mp_rank_00_model_states.pt",), 0),  # killed before `latest` was written
    ("global_step8", "global_step4", ("mp_rank_00_model_states.pt",), 0),  # latest's tag already pruned
    ("global_step4", "global_step4", (), 0),  # latest names a folder with no model states
])
def test_resume_checkpoint_only_trusts_a_complete_latest(orl, tmp_path, tag, latest, files, step):
    """OpenRLHF loads <ckpt.path>/_actor whenever it exists and crashes on one without a loadable
    checkpoint; the launcher resumes a complete one and removes an incomplete one."""
    actor = tmp_path / "ckpt" / "_actor"
    _ds_checkpoint(actor, tag, latest=latest, files=files)
    logs = []
    assert orl.launcher.resume_checkpoint(actor, log=logs.append) == step
    assert actor.exists() == bool(step)
    assert bool(logs) != bool(step)
    assert orl.launcher.resume_checkpoint(tmp_path / "none" / "_actor", log=logs.append) == 0


def _critic_run_ckpt(ckpt: Path, actor_tags, critic_tags, *, actor_latest, critic_latest, states, ranks=2):
    """<ckpt>/_actor and _critic as OpenRLHF and `checkpoints.save_ckpt` leave them: `states`, the
    critic tags whose trainer state (each rank's) was written."""
    from sparserl.engines.openrlhf.checkpoints import critic_state_file
    for t in actor_tags:
        _ds_checkpoint(ckpt / "_actor", t, latest=actor_latest)
    for t in critic_tags:
        _ds_checkpoint(ckpt / "_critic", t, latest=critic_latest)
        for r in range(ranks if t in states else 0):
            critic_state_file(ckpt / "_critic" / t, r).write_bytes(b"x")


@pytest.mark.parametrize("actor,critic,states,step", [
    # both saved step 8 and the critic's state after it: resume 8
    (("global_step4", "global_step8"), ("global_step4", "global_step8"), ("global_step4", "global_step8"), 8),
    # killed between the critic's DeepSpeed save of 8 and its trainer state: back to 4
    (("global_step4", "global_step8"), ("global_step4", "global_step8"), ("global_step4",), 4),
    # killed after the actor's save of 8, before the critic's: back to 4, the actor's 8 removed
    (("global_step4", "global_step8"), ("global_step4",), ("global_step4",), 4),
    # nothing complete in both: start over
    (("global_step8",), ("global_step4",), ("global_step4",), 0),
])
def test_critic_run_resumes_the_newest_step_complete_for_actor_and_critic(orl, tmp_path, actor, critic, states, step):
    """OpenRLHF loads _actor and _critic by their `latest`; the critic's trainer state (FIFO,
    warm-up counter) sits in the critic's tag folder and is written after it: the launcher points
    both `latest` files at the newest tag complete in both, so no state pairs with another step."""
    ckpt = tmp_path / "ckpt"
    _critic_run_ckpt(ckpt, actor, critic, actor_latest=actor[-1], critic_latest=critic[-1], states=states)
    (ckpt / "_critic" / "global_step8").mkdir(exist_ok=True)  # a save cut short before its files
    logs = []
    assert orl.launcher.resume_checkpoint(ckpt / "_actor", critic_ranks=2, log=logs.append) == step
    if step:
        for d in ("_actor", "_critic"):
            assert (ckpt / d / "latest").read_text() == f"global_step{step}"
            assert sorted(p.name for p in (ckpt / d).iterdir() if p.is_dir())[-1] == f"global_step{step}"
        assert bool(logs) == (step != 8)
    else:
        assert not (ckpt / "_actor").exists() and not (ckpt / "_critic").exists() and logs
    # a rank's state missing is a state missing
    _critic_run_ckpt(tmp_path / "b", ["global_step4"], ["global_step4"], actor_latest="global_step4",
                     critic_latest="global_step4", states=["global_step4"], ranks=1)
    assert orl.launcher.resume_checkpoint(tmp_path / "b" / "_actor", critic_ranks=2, log=logs.append) == 0


def test_launcher_keeps_the_harvest_for_the_experience_maker(orl, tmp_path, monkeypatch):
    """`run` must not delete rollouts.jsonl before training: a resumed run's rows up to its
    checkpoint are the V0 harvest's product (the experience maker cuts the rest)."""
    from sparserl.core.paths import RunPaths
    from sparserl.engines.openrlhf import launcher
    from sparserl.methods.spec import load_method
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"results_dir": str(tmp_path / "results")}))
    rp = RunPaths(tmp_path / "results" / "runs", "grpo_g16", 0, engine="openrlhf")
    reads = SimpleNamespace(policy="m", pool=None, reference_cache=None, v0_model=None, v0_embeddings=None)
    rec = SimpleNamespace(spec=load_method("grpo_g16"), paths=rp, seed=0, method="grpo_g16", reads=reads)
    rows = rp.openrlhf / "rollouts.jsonl"
    rows.parent.mkdir(parents=True)
    rows.write_text(json.dumps({"prompt_id": "a", "step": 1, "reward": 1.0, "length": 3}) + "\n")
    seen = {}

    def stop(argv, over, log=print):
        seen["rows"], seen["argv"] = rows.read_text(), argv
        raise SystemExit("stop before training")
    monkeypatch.setattr(launcher, "openrlhf_argv", lambda *a, **k: ["--ckpt.load_enable"])
    monkeypatch.setattr(launcher, "parse_args", lambda argv: SimpleNamespace(
        ckpt=SimpleNamespace(load_enable=True, path=str(rp.checkpoints)), critic=SimpleNamespace(model_name_or_path=None)))
    monkeypatch.setattr(launcher, "write_json", lambda *a, **k: None)
    monkeypatch.setattr(launcher, "build_prompt_dataset", lambda *a, **k: None)
    monkeypatch.setattr(launcher, "train_with_ray", stop)
    with pytest.raises(SystemExit):
        launcher.run({"rl": {"policy": "m"}}, rec, config_paths=[str(cfg)], log=lambda *_: None)
    assert '"step": 1' in seen["rows"]
    assert seen["argv"][-2:] == ["--sparserl.resume_step", "0"]  # no checkpoint: the live prior starts empty


# --------------------------------------------------------------------------- carried estimator state


class _ContextMean:
    """A live prior whose p depends on the sampled context: the mean reward of the prompt's pairs in
    it (0.5 without any), so a resumed run matches only with the support and its RNG restored."""

    def __init__(self, **_kw):
        pass

    def __call__(self, prompt_ids, context=None):
        ctx = list(context or [])
        out = []
        for u in prompt_ids:
            rs = [r for v, r in ctx if v == u]
            out.append(float(np.clip(np.mean(rs), 0.05, 0.95)) if rs else 0.5)
        return np.array(out)


def _carrying_spec(kind: str) -> str:
    from sparserl.methods.spec import load_method
    from sparserl.values.priors import register_prior
    if kind == "live_prior":  # V0.5 fusion with a live prior: support size 6 of 8 rollouts, context 4
        register_prior("test_context_mean", _ContextMean)
        d = load_method("v05_k4").to_dict()
        d.update(prior={"kind": "test_context_mean"}, support_buffer={"size": 6, "context": 4})
    else:  # BASIS calibrated on the previous batch
        d = load_method("basis_grid_grpo_g1_basis").to_dict()
        d["basis"] = {**d["basis"], "calibrate_on": "previous"}
    return json.dumps(d, sort_keys=True)


def _shared_batch(orl, seed: int, group: int):
    """8 rollouts over prompts p0..p2 (shared across steps, so the support matters), with phat."""
    uids = [f"p{i % 3}" for i in range(8 // group) for _ in range(group)]
    return _step_batch(orl, seed, uids, phat=lambda u: 0.25 + 0.25 * int(u[1]))


def _carrying_maker(orl, run_dir, spec: str, *, loaded_step, told):
    """A maker in a fresh process (no live prior built yet); `told`: --sparserl.resume_step."""
    orl.plugin_exp._LIVE_PRIORS.clear()
    m = _maker(orl, run_dir, load_enable=True, loaded_step=loaded_step)
    m.strategy.args.sparserl = SimpleNamespace(spec=spec, run_dir=str(run_dir), seed=3, resume_step=told)
    m.strategy.args.algo.advantage.estimator = json.loads(spec)["estimator"]
    return m


def _advantages(maker, batch) -> np.ndarray:
    return maker.compute_advantages_and_returns(batch)[0].advantages.sum(-1).numpy()


@pytest.mark.parametrize("kind", ["live_prior", "previous_batch"])
def test_resumed_run_carries_the_estimators_state(orl, tmp_path, kind):
    """Killed after step 3 with a checkpoint at step 2 and retried: steps 3 and 4 get the
    uninterrupted run's advantages, because the live prior's support and context RNG, and BASIS's
    previous batch, are restored as step 2 left them; a retry that starts them empty does not."""
    spec = _carrying_spec(kind)
    group = json.loads(spec)["group_size"]
    whole = _carrying_maker(orl, tmp_path / "whole", spec, loaded_step=None, told=0)
    want = [_advantages(whole, _shared_batch(orl, s, group)) for s in (1, 2, 3, 4)]

    killed = _carrying_maker(orl, tmp_path / "retried", spec, loaded_step=None, told=0)
    for s in (1, 2, 33):
        _advantages(killed, _shared_batch(orl, s, group))
    (tmp_path / "retried" / "openrlhf" / "estimator_state.jsonl").open("a").write('{"step": 4, "calib')  # torn
    retry = _carrying_maker(orl, tmp_path / "retried", spec, loaded_step=2, told=2)
    got = [_advantages(retry, _shared_batch(orl, s, group)) for s in (3, 4)]
    np.testing.assert_array_equal(got[0], want[2])
    np.testing.assert_array_equal(got[1], want[3])
    state = [(tmp_path / d / "openrlhf" / "estimator_state.jsonl").read_text() for d in ("whole", "retried")]
    assert state[0] == state[1] and state[0].count("\n") == 4

    # the check fails without the restore: nothing carried into step 3
    (tmp_path / "retried" / "openrlhf" / "estimator_state.jsonl").unlink()
    empty = _carrying_maker(orl, tmp_path / "retried", spec, loaded_step=2, told=2)
    assert not np.array_equal(_advantages(empty, _shared_batch(orl, 3, group)), want[2])


def test_resume_refuses_a_step_the_actors_did_not_load(orl, tmp_path):
    spec = _carrying_spec("previous_batch")
    m = _carrying_maker(orl, tmp_path, spec, loaded_step=2, told=4)
    with pytest.raises(RuntimeError, match=r"resumes after step 4 .* loaded step 2"):
        m.compute_advantages_and_returns(_shared_batch(orl, 1, 1))


def test_a_corrupt_state_row_names_the_file(orl, tmp_path):
    from sparserl.engines.openrlhf.experience import saved_state
    path = tmp_path / "openrlhf" / "estimator_state.jsonl"
    path.parent.mkdir()
    path.write_text('{"step": 1, "calibration": {}}\nnot json\n{"step": 2, "calibration": {}}\n')
    args = SimpleNamespace(sparserl=SimpleNamespace(run_dir=str(tmp_path)))
    with pytest.raises(ValueError, match=r"estimator_state.jsonl: line 2 .* start it over"):
        saved_state(args, 2)


def test_calibration_state_round_trips_through_json():
    from sparserl.methods.sidedata import CalibrationState
    st = CalibrationState(prev_basis=(np.array([0.25, 1 / 3]), np.array([1.0, 0.0])),
                          extra={"tether_rho": np.array([0.1, 0.7], dtype=np.float32), "scalar": np.float64(0.3)})
    back = CalibrationState.from_json(json.loads(json.dumps(st.to_json())))
    for a, b in zip(back.prev_basis, st.prev_basis):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    rho = back.extra["tether_rho"]
    assert rho.dtype == np.float32 and np.array_equal(rho, st.extra["tether_rho"]) and back.extra["scalar"] == 0.3
    assert CalibrationState.from_json(CalibrationState().to_json()) == CalibrationState()
