"""Le Critique's experiments on OpenRLHF 0.11.2 (engines.openrlhf.critique and .envs) on CPU: the
prompt dataset, the env reward function and agent as OpenRLHF loads and drives them, the argument
list, the critique-openrlhf command with OpenRLHF's train() replaced, and the global-step offset
of critic methods (metrics, checkpoints).

Needs the OpenRLHF CPU install (see tests/test_openrlhf_plugin.py); vllm/flash_attn placeholders
from tests/openrlhf_stubs.py for the duration of this module.
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import openrlhf_stubs

openrlhf_stubs.skip_without_openrlhf()
pytestmark = pytest.mark.usefixtures("orl")  # tests/engines/openrlhf/conftest.py

import torch  # noqa: E402

EOT = "<|im_end|>"
REPO = Path(__file__).resolve().parents[3]


TINY_RG = [  # compact problems: fast, offline
    {"name": "gcd", "generator": "gcd", "weight": 0.5,
     "params": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 20}},
    {"name": "bits", "generator": "count_bits", "weight": 0.5, "params": {"min_n": 1, "max_n": 255}},
]


def _cfg(tmp_path, **rl):
    return {
        "scale": "paper", "seed": 0, "results_dir": str(tmp_path / "results"),
        "rollout": {"backend": "vllm", "max_new_tokens": 64, "vllm": {"max_model_len": 512}},
        "critique": {
            "policy_hub": "Qwen/Qwen3-4B-Instruct-2507",
            "envs": {"rg": {"kind": "rg_mixture", "tasks": TINY_RG, "split": {"eval": 0.2, "rl": 0.8}},
                     "sudoku": {"kind": "sudoku", "blanks": [2, 3], "split": {"eval": 0.3, "rl": 0.7}}},
            "rl": {"seeds": [0], "steps": 3, "rollouts_per_step": 64, "lr": 1e-6, "pool": 12,
                   "max_new_tokens": 32, "max_len": 256, "eval": {"problems": 5, "samples": 2}, **rl},
            "experiments": {"rg_k8": {"env": "rg", "k": 8, "methods": ["lc_pvf_answer", "lc_mean"]},
                            "sudoku_k4": {"env": "sudoku", "k": 4, "methods": ["lc_mean", "lc_tether"],
                                          "rl": {"steps": 2, "max_len": 400}}},
        },
    }


_flags = openrlhf_stubs.argv_flags


def _run(cfg, exp, method, seed=0):
    """The run as `critique-openrlhf` resolves it by hand: the config's layout, absolute."""
    from sparserl.core.paths import Paths
    from sparserl.methods.run import resolve_critique_run
    CP = Paths(cfg).critique
    return resolve_critique_run(cfg, exp, method, seed, root=CP.run(exp, method, seed).dir.absolute(),
                                policy=CP.policy(exp).absolute())


def _dataset(orl, cfg, exp, method, seed=0):
    E = orl.critique
    rec = _run(cfg, exp, method, seed)
    run, m = rec.paths, rec.spec
    info = E.build_dataset(cfg, exp, m, seed, run)
    rows = [json.loads(x) for x in info["prompts"].read_text().splitlines()]
    held = [json.loads(x) for x in info["heldout"].read_text().splitlines()]
    return run, m, info, rows, held


# --------------------------------------------------------------------------- dataset


def test_dataset_rows_and_labels(orl, tmp_path):
    from sparserl.envs import make_env
    cfg = _cfg(tmp_path)
    env = make_env("rg_mixture", cfg["critique"]["envs"]["rg"], 0)
    pool = {p.id: p for p in env.problems("rl", 12)}
    for method, warm in [("lc_pvf_answer", 10), ("lc_mean", 0)]:
        run, m, info, rows, held = _dataset(orl, cfg, "rg_k8", method)
        assert m.group_size == 8 and m.name == method  # K from the experiment, the file says 8 too
        assert len(rows) == (3 + warm) * (64 // 8) and info["prompts_per_step"] == 8
        labs = [json.loads(r["label"]) for r in rows]
        assert len({d["uid"] for d in labs}) == len(rows)  # one group per row
        assert {d["pid"] for d in labs} == set(pool)  # the pool, cycled
        for r, d in zip(rows, labs):
            p = pool[d["pid"]]
            assert r["input"] == p.prompt and d["answer"] == p.answer == d["privileged"]
            assert d["env"] == "rg" and d["env_file"] == str(run.openrlhf / "env.json")
        # the engines rebuild the exact Problem from the label
        got, doc, _pool = orl.envs.problem_of(rows[0]["label"])
        assert got == pool[labs[0]["pid"]] and doc["kind"] == "rg_mixture"
        assert len(held) == 5 and all(h["datasource"] == "heldout" for h in held)
        assert all(json.loads(h["label"])["pid"].startswith("rg_mixture/eval/") for h in held)
        env_doc = json.loads(info["env_file"].read_text())
        assert set(env_doc["problems"]) == set(pool) | {json.loads(h["label"])["pid"] for h in held}


# --------------------------------------------------------------------------- reward function


def _load_reward_file(orl):
    """As OpenRLHF's SingleTurnAgentExecutor loads --reward.remote_url <file>.py."""
    ex = orl.agent.SingleTurnAgentExecutor(orl.envs.THIS_FILE)
    assert ex.reward_func is not None
    return ex.reward_func


def test_reward_func_scores_single_turn_responses_through_the_env(orl, tmp_path):
    cfg = _cfg(tmp_path)
    _run, _m, _info, rows, _held = _dataset(orl, cfg, "rg_k8", "lc_mean")
    reward_func = _load_reward_file(orl)
    row = rows[0]
    d = json.loads(row["label"])
    prompt = f"<|im_start|>user\n{row['input']}<|im_end|>\n<|im_start|>assistant\n"  # chat-templated
    right = prompt + f" {d['answer']}{EOT}"
    wrong = prompt + f" {d['answer']}9{EOT}"
    one = reward_func([right], [prompt], [row["label"]])
    assert one == {"rewards": 1.0, "scores": 1.0, "extra_logs": {}}
    two = reward_func([right, wrong], [prompt, prompt], [row["label"]] * 2)
    assert torch.equal(two["rewards"], torch.tensor([1.0, 0.0]))
    # through OpenRLHF's own single-turn executor's reward call
    out = asyncio.run(_single_turn(orl, prompt, row["label"], f" {d['answer']}{EOT}"))
    assert out["reward"] == 1.0 and out["scores"] == 1.0


class CharTok:
    """One token per character (OpenRLHF's executors call tokenizer(text=...)["input_ids"])."""

    def __call__(self, text, add_special_tokens=False, return_tensors=None):
        ids = [ord(c) for c in text]
        return {"input_ids": torch.tensor([ids]) if return_tensors == "pt" else ids}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(int(i)) for i in ids)

    def apply_chat_template(self, msgs, tokenize=False, add_generation_prompt=True):
        return f"<|im_start|>user\n{msgs[0]['content']}<|im_end|>\n<|im_start|>assistant\n"


class ScriptedEngine:
    """A vLLM engine that answers each generate with the next scripted text."""

    def __init__(self, texts, finish="stop"):
        self.texts, self.finish, self.calls = list(texts), finish, []

    async def generate(self, prompt_ids, sampling_params, multi_modal_data=None):
        self.calls.append({"prompt": "".join(chr(i) for i in prompt_ids), "max_tokens": sampling_params.max_tokens})
        text = self.texts.pop(0)
        out = SimpleNamespace(token_ids=[ord(c) for c in text], text=text, logprobs=None,
                              finish_reason="length" if not text.endswith(EOT) else self.finish)
        return SimpleNamespace(outputs=[out])


def _params(max_tokens):
    return openrlhf_stubs.SamplingParams(temperature=1.0, top_p=1.0, max_tokens=max_tokens, logprobs=None)


async def _single_turn(orl, prompt, label, text):
    ex = orl.agent.SingleTurnAgentExecutor(orl.envs.THIS_FILE)
    return await ex.execute(prompt, label, _params(16), 256, CharTok(), ScriptedEngine([text]))


# --------------------------------------------------------------------------- the agent (multi-turn)


def _sudoku(orl, tmp_path):
    cfg = _cfg(tmp_path)
    _run, _m, _info, rows, _held = _dataset(orl, cfg, "sudoku_k4", "lc_mean")
    label = rows[0]["label"]
    problem, _doc, _pool = orl.envs.problem_of(label)
    return cfg, label, problem


def _moves(problem):
    """The correct moves of a 4x4 puzzle, in cell order: 'RC=V'."""
    n, puz, sol = problem.meta["n"], problem.meta["puzzle"], problem.meta["solution"]
    return [f"{i // n + 1}{i % n + 1}={sol[i]}" for i, x in enumerate(puz) if x == "."]


def test_agent_solves_sudoku_turn_by_turn_through_openrlhfs_executor(orl, tmp_path):
    from sparserl.envs.sudoku import render_compact
    _cfg_, label, problem = _sudoku(orl, tmp_path)
    executor = orl.vllm_engine._load_agent_executor(orl.envs.THIS_FILE)  # what the engines do
    assert isinstance(executor, orl.agent.MultiTurnAgentExecutor)
    moves = _moves(problem)
    assert 2 <= len(moves) <= 3
    prompt = CharTok().apply_chat_template([{"content": problem.prompt}])
    engine = ScriptedEngine([f" {m}{EOT}" for m in moves])
    out = asyncio.run(executor.execute(prompt, label, _params(32), 4000, CharTok(), engine))
    assert out["reward"] == 1.0 and out["scores"] == 1.0  # solved on the last move
    assert len(out["action_ranges"]) == len(moves) and engine.texts == []
    # each next turn: the updated grid as a new user turn; each turn capped at 32 new tokens
    grid = list(problem.meta["puzzle"])
    for k, call in enumerate(engine.calls):
        assert call["max_tokens"] == 32  # the trajectory's rest is larger: the per-turn cap wins
        if k:
            i = [j for j, x in enumerate(problem.meta["puzzle"]) if x == "."][k - 1]
            grid[i] = problem.meta["solution"][i]
            obs = f"S: {render_compact(''.join(grid), 4)}\nA:"
            assert call["prompt"].endswith(f"{EOT}\n<|im_start|>user\n{obs}{EOT}\n<|im_start|>assistant\n")
    text = CharTok().decode(out["observation_tokens"])
    assert text.startswith(prompt) and text.count("<|im_start|>user") == len(moves)
    for a, b in out["action_ranges"]:  # the actions are the model's turns, nothing else
        assert CharTok().decode(out["observation_tokens"][a:b]) in {f" {m}{EOT}" for m in moves}


def test_agent_wrong_move_ends_the_episode_with_no_reward(orl, tmp_path):
    _cfg_, label, problem = _sudoku(orl, tmp_path)
    executor = orl.vllm_engine._load_agent_executor(orl.envs.THIS_FILE)
    moves = _moves(problem)
    r, c, v = moves[1][0], moves[1][1], int(moves[1][3])
    wrong = f"{r}{c}={v % 4 + 1}"
    prompt = CharTok().apply_chat_template([{"content": problem.prompt}])
    engine = ScriptedEngine([f" {moves[0]}", f" {wrong}{EOT}", " never"])  # the first turn truncated
    out = asyncio.run(executor.execute(prompt, label, _params(32), 4000, CharTok(), engine))
    assert out["reward"] == 0.0 and len(out["action_ranges"]) == 2 and engine.texts == [" never"]
    # a turn cut by the length limit is closed before the next user turn opens
    assert f" {moves[0]}{EOT}\n<|im_start|>user\nS: " in engine.calls[1]["prompt"]
    # the trajectory budget still binds: with 10 tokens left the next turn gets 10, not the cap
    first = f" {moves[0]}{EOT}"
    feedback = orl.envs.Episode(label).step(first)["feedback"]
    engine = ScriptedEngine([first, " never"])
    budget = len(prompt) + len(first) + len(feedback) + 10
    out = asyncio.run(executor.execute(prompt, label, _params(32), budget, CharTok(), engine))
    assert [c["max_tokens"] for c in engine.calls] == [32, 10] and out["reward"] == 0.0


def test_episode_is_the_envs_own_steps(orl, tmp_path):
    """Episode = env.reset/observe/step on the label's Problem; out of turns counts as done."""
    _cfg_, label, problem = _sudoku(orl, tmp_path)
    ep = orl.envs.Episode(label)
    moves = _moves(problem)
    first = ep.step(f" {moves[0]}\n(and some chatter){EOT}")
    assert first["done"] is False and first["reward"] == 0.0 and first["feedback"].startswith("\n<|im_start|>user\nS: ")
    assert ep.step(f" {moves[1]}{EOT}")["done"] is (len(moves) == 2)
    ep2 = orl.envs.Episode(label)
    out = ep2.step("no move")
    assert out["done"] is True and out["reward"] == 0.0 and out["outcome"] == "malformed"
    with pytest.raises(ValueError, match="over"):
        ep2.step("again")


# --------------------------------------------------------------------------- argv


def test_critique_argv_single_turn_with_a_critic(orl, tmp_path):
    from sparserl.engines.openrlhf.parser import parse_args
    E = orl.critique
    cfg = _cfg(tmp_path)
    rec = _run(cfg, "rg_k8", "lc_pvf_answer", 1)
    argv = E.critique_argv(cfg, rec)
    f = _flags(argv)
    run = rec.paths  # the config's layout, with OpenRLHF's working files under openrlhf/
    from sparserl.core.paths import Paths
    assert run.dir == Paths(cfg).critique.run("rg_k8", "lc_pvf_answer", 1).dir.absolute()
    assert run.tensorboard == run.dir / "openrlhf" / "tensorboard" and run.prompts.parent == run.dir / "openrlhf"
    assert f["rollout.n_samples_per_prompt"] == "8" and f["rollout.batch_size"] == "8"
    assert f["data.max_samples"] == str((3 + 10) * 8)  # the warm-up's prompts on top
    local = str(Path("models/Qwen/Qwen3-4B-Instruct-2507").absolute())  # the hub model's copy (fetch_models)
    assert f["actor.model_name_or_path"] == local
    assert f["critic.model_name_or_path"] == local and f["critic.freezing_steps"] == "9"
    assert f["reward.remote_url"] == orl.envs.THIS_FILE and "train.agent_func_path" not in f
    assert f["data.prompt_dataset"] == str(run.prompts) and f["ckpt.output_dir"] == str(run.final)
    assert f["eval.dataset"] == str(run.openrlhf / "heldout.jsonl") and f["eval.steps"] == str(3 + 10)
    assert f["eval.n_samples_per_prompt"] == "2" and f["data.max_len"] == "256"
    from sparserl.engines.sizing import critique_save_steps  # a resume point every few hours of work
    assert f["rollout.max_new_tokens"] == "32" and f["ckpt.save_steps"] == str(critique_save_steps(cfg, "rg_k8", "lc_pvf_answer", local))
    assert f["data.apply_chat_template"] is True and f["logger.tensorboard_dir"] == str(run.tensorboard)
    spec = json.loads(f["sparserl.spec"])
    assert spec["group_size"] == 8 and spec["critic"]["privileged"] == "answer"
    args = parse_args(argv)  # OpenRLHF's own checks
    assert args.reward.remote_url == [orl.envs.THIS_FILE] and args.critic.freezing_steps == 9
    assert args.rollout.n_samples_per_prompt == 8 and args.eval.steps == 13


def test_critique_argv_multi_turn_uses_the_agent_and_k(orl, tmp_path):
    from sparserl.engines.openrlhf.parser import parse_args
    E = orl.critique
    cfg = _cfg(tmp_path, critic_lr=3e-6)
    f = _flags(E.critique_argv(cfg, _run(cfg, "sudoku_k4", "lc_mean", 0)))
    assert f["rollout.n_samples_per_prompt"] == "4" and f["rollout.batch_size"] == "16"  # 64 / K
    assert f["train.agent_func_path"] == orl.envs.THIS_FILE and "reward.remote_url" not in f
    assert not [k for k in f if k.startswith("critic.")] and f["eval.steps"] == "2" and f["data.max_len"] == "400"
    args = parse_args(E.critique_argv(cfg, _run(cfg, "sudoku_k4", "lc_mean", 0)))
    assert args.reward.remote_url == ["agent"] and args.train.agent_func_path == orl.envs.THIS_FILE
    g = _flags(E.critique_argv(cfg, _run(cfg, "sudoku_k4", "lc_tether", 0)))
    assert g["algo.advantage.estimator"] == "tether" and float(g["critic.adam.lr"]) == 3e-6  # the scale's critic lr
    assert g["eval.steps"] == str(2 + 10) and json.loads(g["sparserl.spec"])["group_size"] == 4


# --------------------------------------------------------------------------- the command


def _fake_train(W, steps, *, eval_value=None, log=None):
    """OpenRLHF's train() as far as the run's files go: TensorBoard scalars per global step."""
    def train(args):
        from torch.utils.tensorboard import SummaryWriter
        log.append(args) if log is not None else None
        w = SummaryWriter(args.logger.tensorboard_dir)
        for g in range(1, steps + W + 1):
            w.add_scalar("train/rollout/reward_mean", 0.01 * g, g)
            w.add_scalar("train/timing/step_total", 2.0, g)
            if W:
                w.add_scalar("train/critic_updates", 2.0 if g <= W else 1.0, g)
        if eval_value is not None:
            w.add_scalar("eval/eval_heldout_pass1", eval_value, steps + W)
        w.close()
        Path(args.ckpt.output_dir).mkdir(parents=True, exist_ok=True)
    return train


def test_critique_openrlhf_uses_the_paths_its_rule_passes(orl, tmp_path, capsys):
    """The rule passes the run's start policy and outputs: the argv names them (absolute), not the
    config's layout; by hand (none given) the layout's; one without the others is refused."""
    import shlex

    import yaml

    from sparserl.cli import main
    from sparserl.core.config import load_config
    cfg = {**load_config(REPO / "configs/paper.yaml"), **_cfg(tmp_path)}  # paper scale, our tiny critique
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    base = ["critique-openrlhf", "--config", str(path), "--experiment", "rg_k8", "--method", "lc_mean", "--seed", "0",
            "--dry-run"]
    run, policy = tmp_path / "elsewhere" / "run", tmp_path / "hub" / "q"
    assert main(base + ["--policy", str(policy), "--metrics", str(run / "metrics.parquet"),
                        "--summary", str(run / "summary.json")]) == 0
    f = _flags(shlex.split(capsys.readouterr().out.strip().splitlines()[-1]))
    assert f["ckpt.output_dir"] == str(run / "final") and f["sparserl.run_dir"] == str(run)
    assert f["logger.tensorboard_dir"] == str(run / "openrlhf" / "tensorboard")
    assert f["actor.model_name_or_path"] == str(policy)
    assert main(base) == 0  # by hand: the config's layout, absolute
    g = _flags(shlex.split(capsys.readouterr().out.strip().splitlines()[-1]))
    assert g["sparserl.run_dir"] == str(_run(cfg, "rg_k8", "lc_mean").dir)
    with pytest.raises(SystemExit, match="--policy, --metrics and --summary together"):
        main(base + ["--policy", str(policy)])


@pytest.mark.parametrize("method,W,eval_value", [("lc_pvf_answer", 10, 0.625), ("lc_mean", 0, None)])
def test_cli_writes_the_runs_metrics_and_summary(orl, tmp_path, monkeypatch, method, W, eval_value):
    import ray
    import yaml

    from sparserl.cli import main
    from sparserl.core.artifacts import read_table
    from sparserl.core.paths import Paths
    from sparserl.studies.le_critique import final_row
    for mod, attrs in [(orl.ppo_trainer, ["RemoteExperienceMaker", "SamplesGenerator"]),
                       (orl.ppo_trainer_async, ["SamplesGenerator"]),
                       (orl.ppo_actor, ["PolicyLoss", "ActorPPOTrainer"]), (orl.ppo_critic, ["CriticPPOTrainer"])]:
        for a in attrs:
            monkeypatch.setattr(mod, a, getattr(mod, a))  # launch's patches, undone afterwards
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    inits, trained = [], []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: inits.append(kw))
    monkeypatch.setattr(orl.train_ppo_ray, "train", _fake_train(W, 3, eval_value=eval_value, log=trained))
    from sparserl.core.config import load_config
    cfg = {**load_config(REPO / "configs/paper.yaml"), **_cfg(tmp_path)}  # paper scale, our tiny critique
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["critique-openrlhf", "--config", str(path), "--experiment", "rg_k8", "--method", method,
                 "--seed", "0"]) == 0
    (args,) = trained
    assert args.rollout.n_samples_per_prompt == 8 and inits
    rp = Paths(cfg).critique.run("rg_k8", method, 0)
    met = read_table(rp.metrics)
    assert met["step"].tolist() == [1, 2, 3]  # policy steps: the warm-up's global steps subtracted
    assert np.allclose(met["reward_mean"], [0.01 * (s + W) for s in (1, 2, 3)])
    assert met["rollouts_total"].tolist() == [64, 128, 192] and (met["wall_time_s"] == 2.0).all()
    summary = json.loads((rp.dir / "summary.json").read_text())
    assert summary["warmup_updates"] == 2 * W and summary["rollouts_total"] == 192 and summary["k"] == 8
    if eval_value is None:
        assert np.isnan(summary["heldout_reward"]) and "heldout_note" in summary
    else:
        assert summary["heldout_reward"] == eval_value and "heldout_note" not in summary
    row = final_row(met, summary, {"heldout_reward": 0.5})  # the tiny-scale tables read it as it is
    assert row["first_reward"] == pytest.approx(0.01 * (1 + W)) and row["rollouts_total"] == 192
    assert (rp.dir / "openrlhf" / "args.json").exists()


# --------------------------------------------------------------------------- the warm-up offset


def test_metrics_and_checkpoints_subtract_the_critic_warmup(orl, tmp_path):
    """OpenRLHF's global step of policy step s is s + W for a critic method (W warm-up steps)."""
    from sparserl.core.paths import Paths
    from sparserl.engines.openrlhf.critic_warmup import critic_warmup_steps
    from sparserl.engines.openrlhf.flags import openrlhf_flags
    from sparserl.engines.openrlhf.launcher import resume_cadence
    from sparserl.engines.openrlhf.metrics import metrics_from_tensorboard
    from sparserl.engines.report import run_checkpoints
    from sparserl.methods.run import resolve_run
    from sparserl.methods.spec import load_method
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(str(tmp_path / "tb"))
    for g in range(1, 6):
        w.add_scalar("train/rollout/reward_mean", float(g), g)
    w.close()
    df = metrics_from_tensorboard(tmp_path / "tb", 2)
    assert df["step"].tolist() == [-1, 0, 1, 2, 3] and df["global_step"].tolist() == [1, 2, 3, 4, 5]
    assert df["critic_warmup"].tolist() == [1, 1, 0, 0, 0] and df["reward_mean"].tolist() == [1, 2, 3, 4, 5]
    assert metrics_from_tensorboard(tmp_path / "tb")["step"].tolist() == [1, 2, 3, 4, 5]  # no critic: as logged

    cfg = {"scale": "paper", "seed": 0, "results_dir": str(tmp_path / "results"),
           "tasks": {"source": "hub", "chat_template": True, "prompt_template": "{problem}"},
           "policies": {"q": {"source": "hub", "hf_name": "Qwen/Qwen3-4B-Instruct-2507"}},
           "rollout": {"backend": "vllm", "max_new_tokens": 64, "vllm": {"max_model_len": 512}},
           "rl": {"policy": "q", "methods": ["lc_vf"], "seeds": [0], "steps": 100, "rollouts_per_step": 512,
                  "lr": 1e-6, "eval_fractions": [0.25, 0.5], "checkpoint_every": 10}}
    m = load_method("lc_vf")
    W = critic_warmup_steps(m)
    run = Paths(cfg).run("lc_vf", 0)
    f = openrlhf_flags(cfg, m, 0, openrlhf_stubs.openrlhf_run(run.final), policy_path="p", resume_every=resume_cadence(cfg, m, "p"))
    for g in f["sparserl.hf_steps"]:  # OpenRLHF's HF copies (engines.openrlhf.checkpoints)
        (Path(f["ckpt.path"]) / f"global_step{g}_hf").mkdir(parents=True)
    run.final.mkdir(parents=True)
    got = run_checkpoints(resolve_run(cfg, "lc_vf", 0, read_choice=False))
    assert W == 10 and [label for label, _ in got] == ["step00025", "step00050", "final"]
    assert got[0][1].name == "global_step35_hf" and got[1][1].name == "global_step60_hf"


# --------------------------------------------------------------------------- the start policy


class FakeBackend:
    """A RolloutBackend answering each prompt with `answer(prompt)`."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def generate(self, prompts, n, params, seed):
        self.calls += 1
        return SimpleNamespace(texts=[self.answer(p) for p in prompts for _ in range(n)])


def test_start_reward_plays_the_envs_like_the_runs(orl, tmp_path):
    from sparserl.envs import make_env
    from sparserl.core.paths import Paths
    E = orl.critique
    cfg = _cfg(tmp_path)
    env = make_env("rg_mixture", cfg["critique"]["envs"]["rg"], 0)
    answers = {p.prompt: p.answer for p in env.problems("eval", 5)}
    right = FakeBackend(lambda p: " " + next(a for q, a in answers.items() if q in p))
    out = E.start_reward(cfg, "rg", Paths(cfg).critique, backend=right, tokenizer=CharTok())
    assert out["heldout_reward"] == 1.0 and out["problems"] == 5 and out["samples"] == 2
    assert E.start_reward(cfg, "rg", Paths(cfg).critique, backend=FakeBackend(lambda p: " nope"), tokenizer=CharTok())["heldout_reward"] == 0.0
    # multi-turn: a malformed first move ends every episode after one turn
    bad = FakeBackend(lambda p: " ??")
    assert E.start_reward(cfg, "sudoku", Paths(cfg).critique, backend=bad, tokenizer=CharTok())["heldout_reward"] == 0.0 and bad.calls == 1


def test_agent_gives_minif2f_the_compiler_feedback_as_the_next_turn(orl, tmp_path, monkeypatch):
    """MiniF2F through the agent against tests/helpers/fake_lean_repl.py: the feedback turn holds
    the Lean messages, not the theorem again; the env file's relative paths become absolute."""
    from helpers.fake_lean_repl import FAKE, STATEMENT
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fake_repl.py").write_text(FAKE)
    rows = [{"name": f"t{i}", "formal_statement": STATEMENT.replace("t1", f"t{i}"),
             "split": "valid" if i % 2 else "test"} for i in range(8)]
    (tmp_path / "minif2f.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = _cfg(tmp_path)
    cfg["critique"]["envs"]["minif2f"] = {
        "kind": "minif2f", "data": "minif2f.jsonl", "project_dir": ".", "sides": {"valid": "rl", "test": "eval"},
        "repl_cmd": [sys.executable, str(tmp_path / "fake_repl.py"), str(tmp_path / "log.jsonl")],
        "timeout_s": 5.0, "header_timeout_s": 5.0}
    cfg["critique"]["experiments"]["minif2f_k4"] = {"env": "minif2f", "k": 4, "methods": ["lc_mean"]}
    _run, _m, info, rows_, held = _dataset(orl, cfg, "minif2f_k4", "lc_mean")
    doc = json.loads(info["env_file"].read_text())
    assert doc["spec"]["data"] == str(tmp_path / "minif2f.jsonl") and Path(doc["spec"]["project_dir"]).is_absolute()
    assert len(held) == 4 and "privileged" not in json.loads(rows_[0]["label"])  # no critic context
    label = rows_[0]["label"]
    problem, _doc, pool = orl.envs.problem_of(label)
    executor = orl.vllm_engine._load_agent_executor(orl.envs.THIS_FILE)
    prompt = CharTok().apply_chat_template([{"content": problem.prompt}])
    engine = ScriptedEngine([f"```lean4\nsimp\n```{EOT}", f"```lean4\nexact h -- GOOD\n```{EOT}"])
    try:
        out = asyncio.run(executor.execute(prompt, label, _params(64), 8000, CharTok(), engine))
        assert out["reward"] == 1.0 and len(out["action_ranges"]) == 2
        second = engine.calls[1]["prompt"]
        turn = second[second.index(f"simp\n```{EOT}"):]
        assert "Attempt 1 of 3 failed" in turn and "unsolved goals" in turn
        assert problem.meta["formal_statement"] not in turn  # the theorem is not repeated
    finally:  # the Lean REPLs of the agent file's own module copy (OpenRLHF loads it by path)
        agent_module = executor.agent_instance_cls.__init__.__globals__
        for p in (pool, agent_module["_load_once"](str(info["env_file"]))[1]):
            while not p._free.empty():
                p._free.get().close()
