"""The local RL trainer: losses, each method's advantage path, OSLA/DAPO sampling, resume."""
import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from sparserl.core.artifacts import read_table, write_table
from sparserl.estimators import EstimatorContext, get_estimator
from sparserl.core.paths import Paths
from sparserl.engines.local.losses import aggregate, gpg_loss, gspo_loss, kl_k3, ppo_clip_loss, token_logprobs
from sparserl.methods.spec import load_method, method_names, prompts_per_step
from sparserl.engines.local.trainer import Trainer, overlong_penalty, train
from sparserl.methods.run import resolve_run
from sparserl.methods.sampling import Sampled
from sparserl.rollout.base import RolloutBatch
from sparserl.tasks import procedural
from helpers.rl_worlds import rl_world


# losses --------------------------------------------------------------------------------------
def test_ppo_clip_hand_computed():
    logp = torch.log(torch.tensor([[1.5, 1.0], [0.5, 1.0]]))
    old = torch.zeros(2, 2)
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, clip = ppo_clip_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, agg="token_mean")
    # row 0: -min(1.5, 1.28) = -1.28, -min(1, 1) = -1 ; row 1: -min(-0.5, -0.8) = 0.8 (masked 2nd)
    assert loss.item() == pytest.approx((-1.28 - 1.0 + 0.8) / 3)
    assert clip.item() == pytest.approx(2 / 3)


def test_aggregations():
    lt = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert aggregate(lt, mask, "token_mean").item() == pytest.approx(2.0)
    assert aggregate(lt, mask, "seq_mean_token_mean").item() == pytest.approx((2.0 + 2.0) / 2)
    assert aggregate(lt, mask, "seq_mean_token_sum").item() == pytest.approx((4.0 + 2.0) / 2)


def test_gspo_uses_the_sequence_ratio():
    logp = torch.log(torch.tensor([[1.0002, 1.0002]])).requires_grad_()
    old = torch.zeros(1, 2)
    loss, clipped = gspo_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2),
                              clip_low=3e-4, clip_high=4e-4)
    assert loss.item() == pytest.approx(-1.0002, rel=1e-6) and clipped.item() == 0.0
    loss2, clipped2 = gspo_loss(torch.log(torch.tensor([[1.01, 1.01]])), old, torch.tensor([1.0]),
                                torch.ones(1, 2), clip_low=3e-4, clip_high=4e-4)
    assert loss2.item() == pytest.approx(-1.0004, rel=1e-6) and clipped2.item() == 1.0


def test_gpg_is_plain_policy_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = gpg_loss(logp, None, torch.tensor([2.0]), torch.ones(1, 2))
    loss.backward()
    assert loss.item() == pytest.approx(3.0)
    assert logp.grad.tolist() == [[-1.0, -1.0]]


def test_kl_k3_zero_at_equal_and_positive():
    a = torch.tensor([-1.0, -2.0])
    assert torch.allclose(kl_k3(a, a), torch.zeros(2))
    assert (kl_k3(a, a + 0.3) > 0).all()


def test_update_direction(tiny_lm):
    """A positive advantage raises the response's log-prob, a negative one lowers it."""
    model, tok = tiny_lm
    model = copy.deepcopy(model)
    p = tok("Q: 3 + 4 =\nA:", add_special_tokens=False)["input_ids"]
    seqs = [p + tok(" \\boxed{7}", add_special_tokens=False)["input_ids"],
            p + tok(" \\boxed{8}", add_special_tokens=False)["input_ids"]]
    for fn in (ppo_clip_loss, gspo_loss, gpg_loss):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=1e-2)
        lp, mask = token_logprobs(m, seqs, [len(p)] * 2, tok.pad_token_id)
        before = (lp * mask).sum(-1).detach()
        loss, _ = fn(lp, lp.detach(), torch.tensor([1.0, -1.0]), mask)
        loss.backward()
        opt.step()
        after = (token_logprobs(m, seqs, [len(p)] * 2, tok.pad_token_id)[0] * mask).sum(-1)
        assert after[0] > before[0] and after[1] < before[1], fn.__name__


def test_token_logprobs_equal_a_per_row_forward(tiny_lm):
    """The batched gather gives each row's response log-probs and entropies, and their gradients,
    exactly as a separate forward of that row alone would (prompts and responses of mixed length)."""
    model, tok = tiny_lm
    m = copy.deepcopy(model)
    rng = np.random.default_rng(0)
    seqs, plens = [], []
    for i in range(6):
        p = tok(f"Q: {i} + {i % 4} {'- 2 ' * (i % 3)}=\nA:", add_special_tokens=False)["input_ids"]
        r = rng.integers(0, len(tok), rng.integers(1, 7)).tolist()
        seqs.append(p + r)
        plens.append(len(p))
    lp, mask, ent = token_logprobs(m, seqs, plens, tok.pad_token_id, with_entropy=True)
    w = torch.randn(lp.shape, generator=torch.Generator().manual_seed(1))
    (lp * w * mask).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    total = 0.0
    for i, (s, p) in enumerate(zip(seqs, plens)):
        logits = m(input_ids=torch.tensor([s])).logits[0, p - 1:-1].float()
        la = torch.log_softmax(logits, -1)
        ref = la.gather(-1, torch.tensor(s[p:])[:, None]).squeeze(-1)
        r = len(s) - p
        assert mask[i].sum() == r and (lp[i, r:] == 0).all() and (ent[i, r:] == 0).all()
        torch.testing.assert_close(lp[i, :r], ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent[i, :r], -(la.exp() * la).sum(-1).detach(), atol=1e-5, rtol=1e-5)
        total = total + (ref * w[i, :r]).sum()
    total.backward()
    for a, b in zip(grads, m.parameters()):
        torch.testing.assert_close(a, b.grad, atol=1e-5, rtol=1e-4)


def test_overlong_penalty():
    pen = overlong_penalty(np.array([4, 8, 10, 12]), max_len=12, buffer=4, penalty=1.0)
    np.testing.assert_allclose(pen, [0.0, 0.0, -0.5, -1.0])


# methods -------------------------------------------------------------------------------------
def test_every_method_loads_and_matches_the_rollout_budget():
    names = method_names()
    assert len(names) >= 26
    for n in names:
        m = load_method(n)
        if m.prompts_per_step is None:  # the matched-prompts arms: tests/methods/test_matched_prompts.py
            assert prompts_per_step(m, 512) * m.group_size == 512
    assert load_method("v05_osla").osla.k_max == 16
    assert load_method("basis_grid_gspo_g1_basis").steps_factor == 0.5


def test_the_math_trainer_trains_a_critic_for_a_critic_method(world):
    """Le Critique's critic methods run in rl.methods too (tests/engines/local/test_math_critics.py)."""
    t = Trainer(world, resolve_run(world, "lc_tether", 0))
    assert t.m.needs_critic and t.critic is not None and t.critic.batch_size == 16
    assert Trainer(world, resolve_run(world, "grpo_g4", 0)).critic is None


# a trainer wired to a tiny world in tmp_path ------------------------------------------------
@pytest.fixture()
def world(tmp_path, tiny_lm, repo):
    return rl_world(tmp_path, tiny_lm, repo)


def _fixed_batch(n_prompts, G, seed=0):
    rng = np.random.default_rng(seed)
    M = n_prompts * G
    return RolloutBatch(prompts=[""] * n_prompts, prompt_ids=[[1]] * n_prompts,
                        prompt_index=np.repeat(np.arange(n_prompts), G), response_ids=[[2]] * M,
                        logprobs=[np.zeros(1)] * M, texts=[""] * M, finish_reason=["stop"] * M,
                        rewards=rng.integers(0, 2, M).astype(np.float32))


@pytest.mark.parametrize("name", [n for n in method_names() if not load_method(n).needs_critic])
def test_each_method_advantages_are_the_registrys(world, name, monkeypatch):
    """The trainer's advantages are the registry estimator's, with the side data built by hand
    from the reference cache (the methods layer must reach the same numbers). A 'v0' prior with
    an empty support buffer says 0.5 (values.v0.prior); here a constant 0.5 stands in for the
    trained V0 this world has not built (tests/values/test_v0.py covers the real one)."""
    from sparserl.values.priors import ConstantPrior
    monkeypatch.setattr("sparserl.values.v0.prior.make_v0_prior", lambda *a, **k: ConstantPrior(0.5))
    t = Trainer(world, resolve_run(world, name, 0))
    idx = np.arange(6)
    batch = _fixed_batch(6, t.m.group_size)
    info = {}
    adv = t.advantages(Sampled(idx, batch), info)
    pids = t.pool["id"].to_numpy()[idx][batch.prompt_index]
    ctx = EstimatorContext()
    if t.m.prior is not None and "prior" in t.m.needs:
        step_ids = t.pool["id"].to_numpy()[idx]
        if t.m.prior.kind == "oracle":
            ref = read_table(Paths(world).reference_cache("s")).set_index("prompt_id")
            a = t.m.prior.pseudo_count
            ctx.prior = {p: (ref["successes"][p] + a) / (ref["n"][p] + 2 * a) for p in step_ids}
        else:
            ctx.prior = {p: t.m.prior.p for p in step_ids}
        assert info["prior_mean"] == pytest.approx(np.mean(list(ctx.prior.values())))
    if "reference" in t.m.needs:
        ctx.phat = {p: t.cached_phat[p] for p in pids}
    ref = get_estimator(t.m.estimator)(batch.rewards, pids, ctx=ctx)
    np.testing.assert_allclose(adv, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("beta", ["calibrate", 2.0, "inf"])
def test_basis_beta_from_the_method_file_reaches_the_trainer(world, tmp_path, monkeypatch, beta):
    """`beta: calibrate` crashed the trainer (float("calibrate")) while the OpenRLHF engine and the
    method schema accepted it; both engines now read beta through the methods layer."""
    import sparserl.methods.spec as spec_mod
    src = Path(spec_mod.METHODS_DIR) / "basis_grid_grpo_g1_basis.yaml"
    d = tmp_path / "methods"
    d.mkdir()
    text = src.read_text().replace("basis: {kind: unb, calibrate_on: current}",
                                   f"basis: {{kind: unb, calibrate_on: current, beta: {beta}}}")
    (d / "basis_beta.yaml").write_text(text)
    monkeypatch.setattr(spec_mod, "METHODS_DIR", d)
    t = Trainer(world, resolve_run(world, "basis_beta", 0))
    idx = np.arange(6)
    batch = _fixed_batch(6, 1)
    adv = t.advantages(Sampled(idx, batch), {})
    pids = t.pool["id"].to_numpy()[idx][batch.prompt_index]
    ctx = EstimatorContext(phat={p: t.cached_phat[p] for p in pids},
                           beta=None if beta == "calibrate" else float(beta))
    np.testing.assert_allclose(adv, get_estimator("basis_unb")(batch.rewards, pids, ctx=ctx), atol=1e-6)


def test_osla_sampling_respects_its_rules(world):
    t = Trainer(world, resolve_run(world, "v05_osla", 0))
    from sparserl.grading.verifier import open_verifier
    with open_verifier(world) as t._ver:
        info = {}
        sampled = t.sampler.sample(info)
    idx, batch = sampled.idx, sampled.batch
    assert set(sampled.prior) == set(t.pool["id"].to_numpy()[idx])
    k = np.bincount(batch.prompt_index, minlength=len(idx))
    assert len(idx) == prompts_per_step(t.m, 16) == 4
    assert (k >= 4).all() and (k <= 16).all() and ((k - 4) % 2 == 0).all()
    assert info["rollouts_generated"] == len(batch) == k.sum()
    assert 0 <= info["osla_reject_rate"] <= 1
    assert sum(info[f"osla_stop_{r}"] for r in ("test", "target", "k_max", "global")) == pytest.approx(1)


def test_dynamic_sampling_keeps_mixed_groups(world):
    t = Trainer(world, resolve_run(world, "dapo_g16", 0))
    from sparserl.grading.verifier import open_verifier
    with open_verifier(world) as t._ver:
        info = {}
        sampled = t.sampler.sample(info)
    idx, batch = sampled.idx, sampled.batch
    assert info["rollouts_generated"] >= len(batch)
    if info["dynamic_sampling_kept"]:
        r = batch.rewards.reshape(len(idx), 16)
        assert (r.min(1) != r.max(1)).all(), "a kept group has all-equal rewards"
        assert len(set(idx.tolist())) == len(idx)


@pytest.mark.e2e  # killed and resumed RL runs
@pytest.mark.parametrize("method", ["grpo_g4", "v05_osla", "basis_grid_gpg_g1_basis"])
def test_resume_gives_the_same_metrics(world, method):
    cfg = copy.deepcopy(world)
    full_cfg = copy.deepcopy(cfg)
    full_cfg["results_dir"] = cfg["results_dir"] + "_full"
    P, Pf = Paths(cfg), Paths(full_cfg)
    for src, dst in ((P.train_pool(), Pf.train_pool()), (P.reference_cache("s"), Pf.reference_cache("s"))):
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    import shutil
    shutil.copytree(P.policy("s"), Pf.policy("s"))

    d_full = train(full_cfg, method, 0)
    with pytest.raises(Exception, match="stopped after step 3"):
        train(cfg, method, 0, stop_after=3)  # the checkpoint is at step 2: step 3 is lost
    d = train(cfg, method, 0)
    a = pd.read_parquet(d / "metrics.parquet").drop(columns=["wall_time_s"])
    b = pd.read_parquet(d_full / "metrics.parquet").drop(columns=["wall_time_s"])
    pd.testing.assert_frame_equal(a, b)
    assert (d / "final" / "config.json").exists()
    from sparserl.core.artifacts import read_manifest
    counts = read_manifest(d / "metrics.parquet")["verifier"]  # grading timeouts are counted, not hidden
    assert counts["items"] > 0 and counts["timeouts"] == 0
    steps = Trainer(cfg, resolve_run(cfg, method, 0)).steps
    assert len(a) == steps
    if steps >= 2:
        assert (d / "checkpoints").exists()


def test_finished_run_leaves_no_resume_state(world):
    d = train(world, "grpo_g4", 0)
    assert not (d / "ckpt").exists(), "a finished run must not resume when Snakemake reruns it"


@pytest.mark.e2e  # two RL runs
def test_fresh_run_drops_an_earlier_settings_checkpoints(world):
    """A run restarted under another config (Snakemake reruns it when `rl` changes) must not carry
    the old run's intermediate checkpoints into its evaluation."""
    from sparserl.engines.report import run_checkpoints
    d = train(world, "grpo_g4", 0)
    assert [n for n, _ in run_checkpoints(resolve_run(world, "grpo_g4", 0, read_choice=False))] == ["step00004", "final"]
    (d / "checkpoints" / "step00003").mkdir()  # left by a run with other eval_fractions
    (d / "eval").mkdir(exist_ok=True)
    (d / "eval" / "step00003.parquet").write_bytes(b"stale")
    cfg = copy.deepcopy(world)
    cfg["rl"]["eval_fractions"] = [0.25]
    train(cfg, "grpo_g4", 0)
    assert sorted(p.name for p in (d / "checkpoints").iterdir()) == ["step00002"]
    assert not (d / "eval").exists()
    assert [n for n, _ in run_checkpoints(resolve_run(cfg, "grpo_g4", 0, read_choice=False))] == ["step00002", "final"]
    with pytest.raises(FileNotFoundError, match="step00004"):
        run_checkpoints(resolve_run(world, "grpo_g4", 0, read_choice=False))


@pytest.mark.e2e  # two RL runs
def test_tensorboard_scalars_and_progress_change_no_metric(world, monkeypatch):
    """TensorBoard gets every numeric metrics.parquet column under its own name, once per step
    even across a kill and resume; drawing a progress bar changes no number."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    import shutil
    cfg = copy.deepcopy(world)
    full_cfg = copy.deepcopy(cfg)
    full_cfg["results_dir"] = cfg["results_dir"] + "_full"
    P, Pf = Paths(cfg), Paths(full_cfg)
    for src, dst in ((P.train_pool(), Pf.train_pool()),):
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    shutil.copytree(P.policy("s"), Pf.policy("s"))
    monkeypatch.setenv("SPARSERL_PROGRESS", "1")  # a tqdm bar, as on a terminal
    d_full = train(full_cfg, "grpo_g4", 0)
    monkeypatch.setenv("SPARSERL_PROGRESS", "0")  # log lines, as in a Snakemake job
    with pytest.raises(Exception, match="stopped after step 3"):
        train(cfg, "grpo_g4", 0, stop_after=3)
    d = train(cfg, "grpo_g4", 0)
    met = pd.read_parquet(d / "metrics.parquet")
    pd.testing.assert_frame_equal(met.drop(columns=["wall_time_s"]),
                                  pd.read_parquet(d_full / "metrics.parquet").drop(columns=["wall_time_s"]))
    tb = P.run("grpo_g4", 0).tensorboard
    assert tb == d / "tensorboard"
    acc = EventAccumulator(str(tb))
    acc.Reload()
    numeric = {c for c in met.columns if c != "step" and pd.api.types.is_numeric_dtype(met[c])
               and not pd.api.types.is_bool_dtype(met[c])}
    assert set(acc.Tags()["scalars"]) == numeric
    ev = acc.Scalars("reward_mean")
    assert [e.step for e in ev] == list(range(1, len(met) + 1))
    assert np.allclose([e.value for e in ev], met["reward_mean"])


def test_run_lists_are_not_part_of_a_runs_identity(world):
    """Adding a method or a seed to rl.methods / rl.seeds must not void the runs already there:
    their resume state is keyed on methods.spec.run_settings (as the DAG's rule params are)."""
    from sparserl.methods.spec import run_settings
    cfg = copy.deepcopy(world)
    cfg["rl"]["methods"] = list(cfg["rl"].get("methods") or []) + ["grpo_g8", "v05_osla"]
    cfg["rl"]["seeds"] = [0, 1, 2, 7]
    assert resolve_run(cfg, "grpo_g4", 0).key == resolve_run(world, "grpo_g4", 0).key
    other = copy.deepcopy(world)
    other["rl"]["steps"] += 1  # a setting of the run itself still counts
    assert resolve_run(other, "grpo_g4", 0).key != resolve_run(world, "grpo_g4", 0).key
    assert "methods" not in run_settings(cfg["rl"]) and "seeds" not in run_settings(cfg["rl"])


@pytest.mark.e2e  # an RL run
def test_a_nan_mid_run_stops_rl_train_at_that_step_and_keeps_the_last_finite_checkpoint(world, tmp_path, repo):
    """The test hook SPARSERL_TEST_INJECT_NAN_AT_STEP makes step 3's loss NaN: rl-train exits
    non-zero naming the step, the method and the kept checkpoint (step 2, checkpoint_every 2),
    whose weights are finite; no final checkpoint is written, and a rerun resumes from step 2."""
    import os
    import subprocess
    import sys
    from sparserl.core.config import write_resolved
    from sparserl.engines.local.trainer import INJECT_NAN_ENV
    cfg_file = write_resolved(world, tmp_path / "cfg")
    cmd = [sys.executable, "-m", "sparserl", "rl-train", "--config", str(cfg_file), "--method", "grpo_g4",
           "--seed", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, timeout=600,
                         env={**os.environ, INJECT_NAN_ENV: "3"})
    run = Paths(world).run("grpo_g4", 0)
    assert out.returncode == 3, out.stderr[-3000:]
    assert (f"method 'grpo_g4' seed 0: non-finite loss (nan) at step 3/8, epoch 1 mini-batch 1" in out.stderr
            and f"the last finite checkpoint, kept, is {run.state} (step 2)" in out.stderr), out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    st = torch.load(run.state, weights_only=False)
    assert st["step"] == 2 and all(torch.isfinite(v).all() for v in st["model"].values())
    assert not run.final.exists()
    t = Trainer(world, resolve_run(world, "grpo_g4", 0))
    assert t.try_resume() and t.step == 2
    assert all(torch.isfinite(p).all() for p in t.model.parameters())


def test_nan_weights_after_the_optimiser_step_stop_the_run(world):
    """A NaN learning rate that reached the trainer without the config check (a dict built in code)
    turns every weight NaN at the first optimiser step: the weight check stops the step."""
    from sparserl.engines.local.trainer import NonFiniteError
    cfg = copy.deepcopy(world)
    cfg["rl"].update(lr=float("nan"), mini_batches=1)
    with pytest.raises(NonFiniteError, match=r"method 'grpo_g4' seed 0: non-finite weight \S+ \(nan\) at step "
                                             r"1/8; .*no checkpoint was saved before it"):
        train(cfg, "grpo_g4", 0)
    assert not Paths(cfg).run("grpo_g4", 0).state.exists()


# file modes and checkpoint durability ---------------------------------------------
def _wrong_modes(root: Path) -> list[str]:
    """Every file under `root` that is not 0644 and every folder that is not 0755."""
    import os
    bad = []
    for d, dirs, files in os.walk(root):
        for names, want in ((dirs, 0o755), (files, 0o644)):
            for n in names:
                mode = os.stat(os.path.join(d, n)).st_mode & 0o7777
                if mode != want:
                    bad.append(f"{oct(mode)} {os.path.join(d, n)}")
    return bad


def test_every_file_of_a_run_is_0644_and_every_folder_0755_weights_included(umask022, world):
    """Under umask 022 nothing a run writes is private (`find results -type f -perm 600` finds
    nothing): the resume states of a killed run, its snapshot's and final weights (safetensors'
    own writer makes 0600), tables, manifests and TensorBoard events."""
    from sparserl.core.artifacts import previous_checkpoint
    results = Path(world["results_dir"])
    run = Paths(world).run("grpo_g4", 0)
    with pytest.raises(Exception, match="stopped after step 5"):
        train(world, "grpo_g4", 0, stop_after=5)  # states at steps 2 and 4, the 0.5 snapshot at 4
    assert run.state.is_file() and previous_checkpoint(run.state).is_file()
    assert (run.checkpoints / "step00004" / "model.safetensors").is_file()
    assert _wrong_modes(results) == []
    train(world, "grpo_g4", 0)
    assert (run.final / "model.safetensors").is_file() and (run.dir / "metrics.parquet").is_file()
    assert _wrong_modes(results) == []


def test_a_truncated_last_pt_resumes_from_the_previous_checkpoint(world):
    """A half-written last.pt (a disk that lost its tail) is detected: the run resumes from prev.pt,
    the state saved before it, and retraces the same steps."""
    from sparserl.core.artifacts import previous_checkpoint
    run = Paths(world).run("grpo_g4", 0)
    prev = previous_checkpoint(run.state)
    with pytest.raises(Exception, match="stopped after step 5"):
        train(world, "grpo_g4", 0, stop_after=5)  # states at steps 2 (prev.pt) and 4 (last.pt)
    first4 = pd.read_parquet(run.metrics).drop(columns=["wall_time_s"])
    assert len(first4) == 4 and torch.load(prev, weights_only=False)["step"] == 2
    data = run.state.read_bytes()
    run.state.write_bytes(data[:len(data) // 2])
    logs: list[str] = []
    t = Trainer(world, resolve_run(world, "grpo_g4", 0), log=logs.append)
    assert t.try_resume() and t.step == 2
    assert any(f"{run.state} is truncated or corrupt" in m and f"previous checkpoint {prev} (step 2)" in m
               for m in logs), logs
    assert not prev.exists()  # it is last.pt now, so the next save keeps it as prev.pt
    d = train(world, "grpo_g4", 0)
    redone = pd.read_parquet(d / "metrics.parquet").drop(columns=["wall_time_s"])
    pd.testing.assert_frame_equal(redone.head(4), first4)


def test_a_truncated_last_pt_without_a_previous_one_names_the_file_and_the_fix(world):
    """With no earlier state to fall back on (one save so far), an empty last.pt (torch's EOFError)
    stops the run with a message naming the file and how to start over, on every rerun alike."""
    from sparserl.core.artifacts import CorruptCheckpointError, previous_checkpoint
    run = Paths(world).run("grpo_g4", 0)
    with pytest.raises(Exception, match="stopped after step 3"):
        train(world, "grpo_g4", 0, stop_after=3)  # one state, at step 2
    assert not previous_checkpoint(run.state).exists()
    run.state.write_bytes(b"")
    for _ in range(2):
        with pytest.raises(CorruptCheckpointError) as e:
            train(world, "grpo_g4", 0)
        msg = str(e.value)
        assert msg.startswith(f"{run.state}: the resume checkpoint is truncated or corrupt (EOFError")
        assert f"delete it (`rm {run.state}`) and rerun to start the run {run.dir} over from step 0" in msg
    run.state.unlink()
    assert len(pd.read_parquet(train(world, "grpo_g4", 0) / "metrics.parquet")) == 8


@pytest.mark.e2e  # an RL run and its evaluation
def test_rl_train_and_rl_eval_log_evaluation_accuracy_and_hyperparameters_to_tensorboard(world, tmp_path):
    """`sparserl rl-train` then `sparserl rl-eval`: the run's TensorBoard folder holds the training
    scalars, the method's and the RL settings' hyperparameters (HParams plugin) and eval/accuracy
    at each evaluated checkpoint's step (4 = half of 8, and 8); a second rl-eval replaces the first."""
    pytest.importorskip("tensorboard")
    from sparserl.cli import main
    from sparserl.core.config import write_resolved
    from helpers.tb_events import hparams, metric_tags, read_events
    cfg = copy.deepcopy(world)
    cfg["evaluation"]["default"] = {"protocol": "mean_at_k", "k": 2, "temperature": 1.0, "top_p": 1.0}
    P = Paths(cfg)
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, P.benchmark(name))
    cfg_file = write_resolved(cfg, tmp_path / "cfg")
    args = ["--config", str(cfg_file), "--method", "grpo_g4", "--seed", "0"]
    assert main(["rl-train", *args]) in (0, None)
    for _ in range(2):
        assert main(["rl-eval", *args]) in (0, None)
    run = P.run("grpo_g4", 0)
    acc = read_events(run.tensorboard)
    ev = read_table(run.eval)
    acc_at = ev.groupby("checkpoint")["accuracy"].mean()
    scalars = acc.Scalars("eval/accuracy")
    assert [e.step for e in scalars] == [4, 8]
    np.testing.assert_allclose([e.value for e in scalars], [acc_at["step00004"], acc_at["final"]], rtol=1e-6)
    bench = sorted(set(ev["benchmark"]))
    assert {f"eval/accuracy/{b}" for b in bench} <= set(acc.Tags()["scalars"])
    assert [e.step for e in acc.Scalars("reward_mean")] == list(range(1, 9))
    hp = hparams(acc)
    spec = load_method("grpo_g4")
    assert hp["method.estimator"] == spec.estimator and hp["method.group_size"] == spec.group_size
    assert hp["rl.steps"] == 8 and hp["rl.lr"] == pytest.approx(1e-4) and hp["seed"] == 0
    assert hp["method.loss.type"] == "ppo_clip"
    assert metric_tags(acc) == ["eval/accuracy", "reward_mean"]


class FakeWandb:
    """A stand-in `wandb` module: records what the trainer hands it, never touches the network."""

    def __init__(self):
        self.inits, self.logs, self.defined, self.finished = [], [], [], 0

    def init(self, **kw):
        self.inits.append(kw)
        return self

    def log(self, values, step=None):
        self.logs.append((dict(values), step))

    def define_metric(self, name, step_metric=None):
        self.defined.append((name, step_metric))

    def finish(self):
        self.finished += 1


def test_wandb_gets_the_same_scalars_offline_when_enabled_and_nothing_by_default(world, monkeypatch):
    import sys
    from sparserl.engines.report import log_evaluation
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    cfg = copy.deepcopy(world)
    cfg["rl"]["steps"] = 2
    cfg["rl"]["eval_fractions"] = []
    train(cfg, "grpo_g4", 0)
    assert fake.inits == [] and fake.logs == []  # off by default
    cfg["logging"] = {"wandb": {"enabled": True, "project": "sparserl-test"}}
    d = train(cfg, "grpo_g4", 0)
    (init,) = fake.inits
    assert init["mode"] == "offline" and init["project"] == "sparserl-test" and init["dir"] == str(d)
    assert init["config"]["method.estimator"] == "grpo" and init["config"]["rl.steps"] == 2
    met = pd.read_parquet(d / "metrics.parquet")
    assert [s for _, s in fake.logs] == [1, 2]
    assert fake.logs[0][0]["reward_mean"] == pytest.approx(met["reward_mean"].iloc[0])
    assert fake.finished == 1
    ev = pd.DataFrame({"checkpoint": ["final", "final"], "benchmark": ["a", "b"], "accuracy": [0.25, 0.75]})
    log_evaluation(cfg, resolve_run(cfg, "grpo_g4", 0), ev)
    assert fake.inits[1]["id"] == init["id"] and fake.inits[1]["resume"] == "allow"  # the same W&B run
    assert fake.defined == [("eval/*", "eval/step")]
    assert fake.logs[-1] == ({"eval/accuracy": 0.5, "eval/accuracy/a": 0.25, "eval/accuracy/b": 0.75,
                              "eval/step": 2}, None)
    # enabled without wandb installed: a warning, TensorBoard only
    monkeypatch.setitem(sys.modules, "wandb", None)
    from sparserl.core.runlog import RunLog
    said = []
    RunLog(cfg, d / "tensorboard", "x", log=said.append).close()
    assert said and "wandb is not installed" in said[0]


@pytest.mark.parametrize("method", ["grpo_g4", "dapo_g16"])  # sequence-mean and token-mean losses
def test_length_sorted_micro_batches_give_the_one_pass_update(world, method):
    """rl.micro_batch_size below the mini-batch cuts it into micro-batches of similar response
    lengths (less padding, world 2.0's 14 to 59 tokens); the weights after an update are those of
    one pass, to float rounding."""
    rng = np.random.default_rng(3)
    M = 16
    lengths = rng.integers(1, 9, M)
    batch = RolloutBatch(prompts=[""] * 4, prompt_ids=[[1, 5], [1, 6, 7], [1], [1, 8]],
                         prompt_index=np.repeat(np.arange(4), 4),
                         response_ids=[rng.integers(3, 20, n).tolist() for n in lengths],
                         logprobs=[rng.normal(-2, 0.3, n) for n in lengths], texts=[""] * M,
                         finish_reason=["stop"] * M, rewards=rng.integers(0, 2, M).astype(np.float32))
    adv = rng.normal(0, 1, M).astype(np.float32)
    weights = []
    for mb in (256, 3):
        cfg = copy.deepcopy(world)
        cfg["rl"].update(micro_batch_size=mb, mini_batches=1)
        t = Trainer(cfg, resolve_run(cfg, method, 0))
        t.update(copy.deepcopy(batch), adv, {})
        weights.append({k: v.detach().clone() for k, v in t.model.named_parameters()})
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # two code paths ran
    # Adam's first step divides each gradient by its own size, so an entry whose gradient is
    # rounding noise moves by up to 2 lr either way (seen on AVX2, not on AVX-512): a few such
    # entries are rounding; a wrong split of the batch moves most of them
    far = {k: int((~torch.isclose(weights[1][k], weights[0][k], rtol=1e-5, atol=1e-7)).sum()) for k in weights[0]}
    total = sum(v.numel() for v in weights[0].values())
    assert sum(far.values()) <= total // 1000, {k: n for k, n in far.items() if n}


KILL_EACH_STEP = r'''
import json, os, shutil, signal, sys
from pathlib import Path
import torch
from sparserl.cli.clean import find_leftovers
from sparserl.core.artifacts import (MANIFEST_SUFFIX, load_checkpoint, previous_checkpoint, read_manifest,
                                     read_table)
from sparserl.engines.local.trainer import Trainer
from sparserl.methods.run import resolve_run

cfg = json.loads(Path(sys.argv[1]).read_text())
t = Trainer(cfg, resolve_run(cfg, "grpo_g4", 0))
last, run = t.state_file, t.dir
prev = previous_checkpoint(last)


def save(step):  # Trainer.save_state: the resume state, then metrics.parquet and rollouts.parquet
    t.step = step
    t.metrics = [{"step": s, "reward_mean": s / 10} for s in range(1, step + 1)]
    t.harvest = [{"prompt_id": 0, "step": s, "reward": 1.0, "length": 3} for s in range(1, step + 1)]
    t.save_state()


def kill_at(k):
    """SIGKILL this process just before its k-th os call that changes the disk (or opens a file)."""
    n = [0]
    for name in ("open", "fchmod", "fsync", "close", "replace", "rename", "link", "unlink", "remove",
                 "mkdir", "rmdir"):
        def call(*a, _real=getattr(os, name), **kw):
            n[0] += 1
            if n[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(*a, **kw)
        setattr(os, name, call)


def shared():
    return last.exists() and prev.exists() and last.stat().st_ino == prev.stat().st_ino


def orphans():
    """Manifests without their artifact, or describing another file (its row count)."""
    out = []
    for m in sorted(run.rglob("*" + MANIFEST_SUFFIX)):
        art = m.with_name(m.name[:-len(MANIFEST_SUFFIX)])
        if not art.exists() or read_manifest(art)["rows"] != len(read_table(art)):
            out.append(m.name)
    return out


save(1)
save(2)
base = run.parent / "baseline"
shutil.copytree(run, base)
for k in range(1, 1000):
    shutil.rmtree(run)
    shutil.copytree(base, run)
    pid = os.fork()
    if pid == 0:
        try:
            kill_at(k)
            save(3)
        finally:
            os._exit(0)  # the save finished before its k-th call
    killed = os.WIFSIGNALED(os.waitpid(pid, 0)[1])
    rec = {"k": k, "killed": killed, "shared": shared(), "files": sorted(p.name for p in last.parent.iterdir()),
           "orphans_before": orphans()}
    try:
        rec["loaded"] = load_checkpoint(last, log=lambda m: None)["step"]
    except Exception as e:
        rec["loaded"] = f"{type(e).__name__}: {e}"
    save(4)  # the next save
    rec.update(shared_after=shared(), after=load_checkpoint(last)["step"],
               prev_after=torch.load(prev, weights_only=False)["step"], orphans=orphans(),
               leftovers=[p.name for p in find_leftovers([run])])
    print(json.dumps(rec), flush=True)
    if not killed:
        break
'''


@pytest.mark.e2e  # a killed process per step, ~9 s
def test_a_kill_at_any_step_of_a_save_leaves_a_loadable_state_never_shared(world, tmp_path):
    """Trainer.save_state killed (SIGKILL) just before each of its os calls in turn: a state always
    loads (the new one or the one before), ckpt/last.pt and ckpt/prev.pt are never one file (a
    hard link, which one truncation damages in both), and after the next save no manifest lacks
    its table or describes another one, and no temp file is left."""
    import json
    import subprocess
    import sys
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(world))
    out = subprocess.run([sys.executable, "-c", KILL_EACH_STEP, str(cfg)], capture_output=True, text=True,
                         timeout=600, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    recs = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(recs) > 20 and all(r["killed"] for r in recs[:-1]) and not recs[-1]["killed"], recs[-1]
    for r in recs:
        assert r["loaded"] in (2, 3), r
        assert not r["shared"] and not r["shared_after"], r
        assert (r["after"], r["prev_after"]) == (4, r["loaded"]), r
        assert r["orphans"] == [] and r["leftovers"] == [], r
    # the kill between the two renames: last.pt missing, prev.pt the state before (it loads)
    assert any(r["files"] == ["prev.pt"] or ("last.pt" not in r["files"] and "prev.pt" in r["files"])
               for r in recs), [r["files"] for r in recs]
    assert recs[-1]["loaded"] == 3
    assert any(r["orphans_before"] for r in recs)  # a kill between a table and its manifest was among them
