"""What a cluster user and a new user meet: file modes, leftovers of killed jobs, a full disk,
`sparserl show` and `clean`, progress and logs, TensorBoard, the RL summary's rollout notes."""
import errno
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sparserl.cli import main
from sparserl.core.artifacts import _describe_series, write_table
from sparserl.models.policies import save_hf

UNIQ = "abcd_123"  # what mkstemp/mkdtemp put between prefix and suffix (8 of [a-z0-9_])


class FakeModel:
    """save_pretrained like HF's: a few files, or a full disk after the first one."""

    def __init__(self, fail_with: int | None = None):
        self.fail_with = fail_with

    def save_pretrained(self, d):
        Path(d, "config.json").write_text("{}")
        if self.fail_with:
            raise OSError(self.fail_with, os.strerror(self.fail_with))
        Path(d, "model.safetensors").write_bytes(b"0" * 16)


class FakeTokenizer:
    def save_pretrained(self, d):
        Path(d, "tokenizer.json").write_text("{}")


def test_artifacts_and_checkpoints_respect_the_umask(tmp_path, umask022):
    write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")
    assert (tmp_path / "t.parquet").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "t.parquet.manifest.json").stat().st_mode & 0o777 == 0o644
    save_hf(FakeModel(), FakeTokenizer(), tmp_path / "m@p50", {"step": 1})
    assert (tmp_path / "m@p50").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "m@p50" / "sparserl.json").stat().st_mode & 0o777 == 0o644


def test_next_write_removes_the_same_artifacts_leftovers(tmp_path):
    mine = [tmp_path / f".metrics.parquet.{UNIQ}.tmp",
            tmp_path / f".metrics.parquet.manifest.json.{UNIQ}.tmp"]
    other = tmp_path / f".rollouts.parquet.{UNIQ}.tmp"  # another job's artifact: not ours
    for f in mine + [other]:
        f.write_text("half")
    write_table(pd.DataFrame({"a": [1]}), tmp_path / "metrics.parquet")
    assert not any(f.exists() for f in mine) and other.exists()
    half = tmp_path / f".m@p50.{UNIQ}"
    half.mkdir()
    (half / "config.json").write_text("{}")
    keep = tmp_path / f".m@p75.{UNIQ}"
    keep.mkdir()
    save_hf(FakeModel(), FakeTokenizer(), tmp_path / "m@p50", {"step": 1})
    assert not half.exists() and keep.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".m@")) == [keep.name]


def test_full_disk_names_the_checkpoint_and_removes_the_partial_folder(tmp_path):
    out = tmp_path / "policies" / "m@p50"
    with pytest.raises(OSError) as e:
        save_hf(FakeModel(fail_with=errno.ENOSPC), FakeTokenizer(), out, {"step": 1})
    assert e.value.errno == errno.ENOSPC
    assert str(out) in str(e.value) and "free space" in str(e.value)
    assert list(out.parent.iterdir()) == [], "a partial hidden folder stayed behind"
    # an existing checkpoint survives a failed save
    save_hf(FakeModel(), FakeTokenizer(), out, {"step": 1})
    with pytest.raises(OSError):
        save_hf(FakeModel(fail_with=errno.ENOSPC), FakeTokenizer(), out, {"step": 2})
    assert json.loads((out / "sparserl.json").read_text()) == {"step": 1}
    assert [p.name for p in out.parent.iterdir()] == ["m@p50"]


def test_clean_tmp_lists_then_removes_leftovers(tmp_path, capsys):
    run = tmp_path / "results" / "tiny" / "rl" / "grpo_g8" / "seed0"
    (run / "ckpt").mkdir(parents=True)
    junk = [run / f".metrics.parquet.{UNIQ}.tmp", run / "ckpt" / "last.tmp",
            run / "checkpoints" / f".step00030.{UNIQ}"]
    junk[2].mkdir(parents=True)
    (junk[2] / "model.safetensors").write_bytes(b"0" * 10)
    junk[0].write_text("x")
    junk[1].write_text("x")
    keep = [run / "metrics.parquet", run / "ckpt" / "last.pt", tmp_path / "results" / "tiny" / ".config"]
    keep[2].mkdir()
    for f in keep[:2]:
        f.write_text("x")
    root = str(tmp_path / "results")
    assert main(["clean", "--tmp", "--min-age", "0", "-n", root]) == 0
    out = capsys.readouterr().out
    assert all(str(j) in out for j in junk) and "found 3 leftovers" in out
    assert all(j.exists() for j in junk)
    assert main(["clean", "--tmp", "--min-age", "5", root]) == 0  # all too young: kept
    assert all(j.exists() for j in junk)
    assert main(["clean", "--tmp", "--min-age", "0", root]) == 0
    assert not any(j.exists() for j in junk) and all(k.exists() for k in keep)


def test_show_missing_file_prints_one_line(tmp_path, capsys):
    assert main(["show", str(tmp_path / "nope.parquet")]) == 1
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.strip().count("\n") == 0 and "nope.parquet" in cap.err
    assert "Traceback" not in cap.err


def test_show_separates_a_7_character_dtype_from_its_statistics():
    for s in (pd.Series([0.5, 1.0]), pd.Series([1, 2], dtype="int64"),
              pd.Series(["a", "b"], dtype=object), pd.Series([True])):
        text = _describe_series(s)
        assert re.match(r"^\S+ +\S", text) and not re.match(r"^\S*\d(min|mean|unique)=", text), text
    assert _describe_series(pd.Series([0.5])).startswith("float64 min=")


def test_logging_has_one_format_and_library_code_has_no_prints():
    src = Path(__file__).resolve().parents[2] / "src" / "sparserl"
    for sub in ("evaluation", "engines/report.py", "engines/local", "values", "models"):
        for f in ([src / sub] if sub.endswith(".py") else sorted((src / sub).rglob("*.py"))):
            assert not re.search(r"^\s*print\(|log=print", f.read_text(), re.M), f"bare print in {f}"
    from sparserl.core.logs import FORMAT, setup_logging
    setup_logging()
    setup_logging()  # once: a second call adds no handler
    handlers = logging.getLogger("sparserl").handlers
    assert len(handlers) == 1 and handlers[0].formatter._fmt == FORMAT


def test_progress_off_a_terminal_logs_lines_with_an_eta(monkeypatch, caplog):
    from sparserl.core.logs import progress
    monkeypatch.delenv("SPARSERL_PROGRESS", raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    with caplog.at_level(logging.INFO, logger="sparserl"):
        bar = progress(10, "rl grpo_g8 s0", every=5, initial=0)
        for _ in range(10):
            bar.update(1)
        bar.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("ETA" in m for m in lines) and "10/10 steps" in lines[-1]


def test_rollout_progress_counts_rows_and_changes_no_sample(tiny_lm, monkeypatch, caplog):
    from sparserl.evaluation.progress import rollout_progress
    from sparserl.rollout import SamplingParams
    from sparserl.rollout.hf import HFBackend
    monkeypatch.setenv("SPARSERL_PROGRESS", "0")
    model, tok = tiny_lm
    be = HFBackend(model, tok, batch_size=4)  # 5 prompts x 2 = 10 rows: chunks 4, 4, 2
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=4)
    prompts = [f"Q: {i} + 1 =\nA:" for i in range(5)]
    plain = be.generate(prompts, 2, params, seed=3)
    with caplog.at_level(logging.INFO, logger="sparserl"):
        with rollout_progress(be, 10, "evaluate x") as bar:
            counted = be.generate(prompts, 2, params, seed=3)
    assert bar.n == 10
    assert be.on_rows is None, "the meter must be unhooked afterwards"
    assert counted.texts == plain.texts
    assert all(np.array_equal(a, b) for a, b in zip(counted.logprobs, plain.logprobs))
    assert any("10/10 rollouts" in r.getMessage() for r in caplog.records)


@pytest.mark.e2e  # a fresh process with DeepSpeed installed
def test_save_hf_does_not_import_deepspeed(repo, tmp_path):
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed here: nothing could import it")
    code = f"""
import sys, torch
sys.path.insert(0, {str(repo / 'tests')!r})
from conftest import tiny_lm
from sparserl.models.policies import build_model, save_hf
from sparserl.models.tokenizer import train_tokenizer
from pathlib import Path
tok = train_tokenizer(["Q: 1 + 1 =\\nA: \\\\boxed{{2}}"] * 20, 120, Path({str(tmp_path)!r}) / "tok", 24)
model = build_model({{"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                     "ffn_size": 64}}, tok, 24)
save_hf(model, tok, Path({str(tmp_path)!r}) / "ck", {{}})
print("deepspeed loaded:", "deepspeed" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "deepspeed loaded: False" in out.stdout
    assert "accelerator" not in out.stderr


def _pretrain_world(repo, root):
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.models.tokenizer import train_tokenizer
    from sparserl.tasks import format_prompt, format_target, procedural
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(root)
    cfg["policies"] = {"s": {**cfg["policies"]["s"], "steps": 3}}
    cfg["pretrain"]["snapshots"] = []
    P = Paths(cfg)
    corpus = procedural.make_pretrain_corpus(cfg)
    write_table(corpus, P.pretrain_corpus())
    texts = [format_prompt(cfg, p) + format_target(cfg, a) for p, a in zip(corpus["problem"], corpus["answer"])]
    train_tokenizer(texts, 268, P.tokenizer(), 24)
    return cfg


def test_pretrain_raises_no_requires_grad_warning(repo, tmp_path):
    from sparserl.core.paths import Paths
    from sparserl.models.policies import pretrain, pretrain_files
    cfg = _pretrain_world(repo, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pretrain(cfg, "s", **pretrain_files(Paths(cfg), "s"))
    assert not [w for w in caught if "requires_grad" in str(w.message)]


def test_summary_says_why_rollout_totals_differ(tmp_path):
    from sparserl.core.paths import Paths
    from sparserl.engines.report import summarize_runs
    cfg = {"scale": "smoke", "results_dir": str(tmp_path), "rollout": {"backend": "hf"},
           "rl": {"methods": ["grpo_g8", "basis_grid_grpo_g1_basis", "dapo_g16",
                              "v05_osla_constant_prior"], "seeds": [0], "steps": 4,
                  "rollouts_per_step": 64}}
    P = Paths(cfg)
    per = {"grpo_g8": (4, [64] * 4, [64] * 4, None),
           "basis_grid_grpo_g1_basis": (2, [64] * 2, [64] * 2, None),
           "dapo_g16": (4, [192, 256, 192, 128], [64] * 4, None),
           "v05_osla_constant_prior": (4, [190, 200, 180, 200], [190, 200, 180, 200], [3, 4, 3, 4])}
    for m, (steps, gen, trained, rounds) in per.items():
        run = P.run(m, 0)
        met = pd.DataFrame({"step": range(1, steps + 1), "rollouts_generated": gen,
                            "rollouts_trained": trained, "rollouts_total": np.cumsum(gen),
                            "rollouts_per_prompt_mean": 8.0, "reward_mean": 0.5, "wall_time_s": 1.0})
        if rounds:
            met["osla_rounds"] = rounds
        write_table(met, run.metrics)
        write_table(pd.DataFrame({"checkpoint": ["final"], "benchmark": ["b"], "accuracy": [0.5]}), run.eval)
    agg = summarize_runs(cfg, Paths(cfg)).set_index("method")
    # the rule's outputs, when it names them: written there, nowhere else
    before = [f.stat().st_mtime_ns for f in (P.rl_runs(), P.rl_summary())]
    summarize_runs(cfg, P, out_runs=tmp_path / "o/runs.parquet", out_summary=tmp_path / "o/summary.parquet")
    assert pd.read_parquet(tmp_path / "o/summary.parquet").equals(pd.read_parquet(P.rl_summary()))
    assert pd.read_parquet(tmp_path / "o/runs.parquet").equals(pd.read_parquet(P.rl_runs()))
    assert [f.stat().st_mtime_ns for f in (P.rl_runs(), P.rl_summary())] == before
    old = ["seeds", "rollouts_total", "rollouts_per_prompt", "train_reward", "eval_accuracy",
           "eval_accuracy_sd", "wall_time_s"]
    assert list(agg.reset_index().columns[:len(old) + 1]) == ["method"] + old  # added, not moved
    assert agg.loc["grpo_g8", "rollouts_note"] == "the fixed budget: 64 rollouts per step"
    assert "2 of 4 steps" in agg.loc["basis_grid_grpo_g1_basis", "rollouts_note"]
    assert agg.loc["dapo_g16", "rollouts_total"] == 768 and agg.loc["dapo_g16", "rollouts_trained"] == 256
    assert "512 generated rollouts not trained" in agg.loc["dapo_g16", "rollouts_note"]
    note = agg.loc["v05_osla_constant_prior", "rollouts_note"]
    assert "192 rollouts trained per step instead of 64" in note and "3.5 OSLA rounds" in note
    runs = pd.read_parquet(P.rl_runs())
    assert {"rollouts_generated", "rollouts_trained", "rollouts_note"} <= set(runs.columns)


@pytest.mark.e2e  # a benchmark run, ~7 s
def test_rollout_throughput_quick_mode_reports_progress(repo):
    env = {**os.environ, "PYTHONPATH": str(repo / "src"), "SPARSERL_PROGRESS": "0"}
    out = subprocess.run([sys.executable, str(repo / "perf/rollout_throughput.py"), "--quick",
                          "--policy", "none", "--threads", "1", "--no-vllm"], capture_output=True, text=True,
                         env=env, timeout=300, cwd=repo)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "16 prompts x n=4 = 64 rows" in out.stdout
    for anchor in ("generate", "eager-kv", "hf-backend", "cpu-engine"):  # side by side, one run
        assert re.search(rf"^{anchor} +[0-9.]+ +[0-9.]+ +[0-9.]+ ", out.stdout, re.M), anchor
    assert re.search(r"FLOP bound: .* bound/engine = [0-9.]+", out.stdout)
    assert re.search(r"\[4/4\] cpu-engine: 1 x 64 rows", out.stderr)  # progress, one line a variant


@pytest.mark.e2e  # DAG dry run
def test_methods_with_one_spec_share_one_run(tmp_path, repo):
    """vanilla_g1 and basis_grid_grpo_g1_vanilla are one config: the DAG trains it once and both
    names report that run (no duplicate grid entry)."""
    from sparserl.core.paths import Paths
    from sparserl.engines.report import summarize_runs
    from sparserl.methods.run import method_run
    from sparserl.methods.spec import run_owners
    names = ["grpo_g8", "vanilla_g1", "basis_grid_grpo_g1_vanilla", "reinforce_pp_g1",
             "basis_grid_grpo_g1_rpp", "basis_grid_gpg_g1_vanilla"]
    owners = run_owners(names)
    assert owners == {"grpo_g8": "grpo_g8", "vanilla_g1": "vanilla_g1",
                      "basis_grid_grpo_g1_vanilla": "vanilla_g1", "reinforce_pp_g1": "reinforce_pp_g1",
                      "basis_grid_grpo_g1_rpp": "reinforce_pp_g1",
                      "basis_grid_gpg_g1_vanilla": "basis_grid_gpg_g1_vanilla"}
    cfg = {"scale": "smoke", "results_dir": str(tmp_path), "rollout": {"backend": "cpu"},
           "rl": {"methods": names, "seeds": [0], "steps": 2, "rollouts_per_step": 16}}
    assert method_run(cfg, "basis_grid_grpo_g1_vanilla", 0).dir == Paths(cfg).run("vanilla_g1", 0).dir
    for m in set(owners.values()):
        run = Paths(cfg).run(m, 0)
        write_table(pd.DataFrame({"step": [1, 2], "rollouts_generated": 16, "rollouts_total": [16, 32],
                                  "rollouts_per_prompt_mean": 1.0, "reward_mean": [0.1, 0.2],
                                  "wall_time_s": 1.0}), run.metrics)
        write_table(pd.DataFrame({"checkpoint": ["final"], "benchmark": ["b"],
                                  "accuracy": [len(m) / 100]}), run.eval)
    agg = summarize_runs(cfg, Paths(cfg)).set_index("method")
    assert agg.loc["basis_grid_grpo_g1_vanilla", "run"] == "vanilla_g1"
    assert agg.loc["basis_grid_grpo_g1_vanilla", "eval_accuracy"] == agg.loc["vanilla_g1", "eval_accuracy"]
    assert not Paths(cfg).run("basis_grid_grpo_g1_vanilla", 0).dir.exists()
    # and the DAG asks for the owner's run only
    out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(tmp_path / "wd"),
                          "-n", "--cores", "1", "rl"],
                         capture_output=True, text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-2000:]
    assert "vanilla_g1/seed0" in log and "basis_grid_grpo_g1_vanilla/seed" not in log


def test_summary_reads_gains_over_the_start_policy(tmp_path):
    """Gains over the RL start policy's evaluation, in-distribution (benchmarks drawn
    from a pool level) and harder read apart, and the train-reward gain beside them."""
    from sparserl.core.paths import Paths
    from sparserl.engines.report import summarize_runs
    lv = {"generator": "chain_sum", "params": {"min_terms": 2, "max_terms": 2}}
    cfg = {"scale": "smoke", "results_dir": str(tmp_path), "rollout": {"backend": "cpu"},
           "tasks": {"train_pool": {"levels": [{"name": "a", **lv}]},
                     "benchmarks": [{"name": "a", **lv},
                                    {"name": "hard", "generator": "chain_sum", "params": {"min_terms": 4}}]},
           "rl": {"policy": "s", "methods": ["grpo_g8"], "seeds": [0, 1], "steps": 10, "rollouts_per_step": 16}}
    P = Paths(cfg)
    write_table(pd.DataFrame({"benchmark": ["a", "hard"], "accuracy": [0.5, 0.1]}), P.eval_table("s"))
    for seed, (acc_a, acc_h) in enumerate([(0.7, 0.1), (0.8, 0.2)]):
        run = P.run("grpo_g8", seed)
        write_table(pd.DataFrame({"step": range(1, 11), "rollouts_generated": 16,
                                  "rollouts_total": np.arange(1, 11) * 16, "rollouts_per_prompt_mean": 8.0,
                                  "reward_mean": [0.2] + [0.3] * 7 + [0.6, 0.6], "wall_time_s": 1.0}),
                    run.metrics)
        write_table(pd.DataFrame({"checkpoint": ["final", "final"], "benchmark": ["a", "hard"],
                                  "accuracy": [acc_a, acc_h]}), run.eval)
    agg = summarize_runs(cfg, Paths(cfg)).set_index("method").loc["grpo_g8"]
    assert agg["start_eval_accuracy"] == pytest.approx(0.3)
    assert agg["eval_gain"] == pytest.approx((0.4 + 0.5) / 2 - 0.3)
    assert agg["eval_gain_in_distribution"] == pytest.approx(0.75 - 0.5)
    assert agg["eval_gain_harder"] == pytest.approx(0.15 - 0.1)
    assert agg["train_reward_gain"] == pytest.approx(0.6 - 0.2)   # last fifth - first tenth
    assert agg["eval_accuracy_se"] == pytest.approx(0.05)          # s.e. over the two seeds


def test_summary_reports_greedy_pass_and_the_greedy_wrong_split(tmp_path, monkeypatch):
    """Final greedy accuracy and pass@k beside mean@k, and mean@k and greedy on the
    held-out problems whose start-policy greedy answer is wrong (chosen from the start's `greedy`
    column, not the run's), with the start's values, the gains and the split's share."""
    from sparserl.core.paths import Paths
    from sparserl.engines import report
    from sparserl.engines.report import summarize_runs
    cfg = {"scale": "smoke", "results_dir": str(tmp_path), "rollout": {"backend": "cpu"},
           "rl": {"policy": "s", "methods": ["grpo_g8"], "seeds": [0, 1], "steps": 10, "rollouts_per_step": 16}}
    P = Paths(cfg)
    ids = ["a/0", "a/1", "a/2", "b/0"]
    bench = ["a", "a", "a", "b"]
    # the start: greedy wrong on a/1 and b/0 (half of the held-out problems)
    write_table(pd.DataFrame({"benchmark": ["a", "b"], "accuracy": [0.5, 0.25], "pass_at_k": [1.0, 0.5],
                              "pass_metric": "pass@16", "greedy_accuracy": [2 / 3, 0.0]}), P.eval_table("s"))
    write_table(pd.DataFrame({"benchmark": bench, "id": ids, "p": [0.75, 0.25, 0.5, 0.25],
                              "pass": 1.0, "greedy": [1.0, 0.0, 1.0, 0.0]}),
                P.stage("eval", "s", "eval_per_problem.parquet"))
    finals = {0: ([0.5, 0.5, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]), 1: ([1.0, 0.75, 0.5, 0.5], [1.0, 1.0, 0.0, 1.0])}
    for seed, (p, g) in finals.items():
        run = P.run("grpo_g8", seed)
        write_table(pd.DataFrame({"step": range(1, 11), "rollouts_generated": 16,
                                  "rollouts_total": np.arange(1, 11) * 16, "rollouts_per_prompt_mean": 8.0,
                                  "reward_mean": 0.3, "wall_time_s": 1.0}), run.metrics)
        pp = pd.DataFrame({"benchmark": bench, "id": ids, "p": p, "pass": [float(x > 0) for x in p], "greedy": g})
        write_table(pp, run.eval_dir / "final_per_problem.parquet")
        by = pp.groupby("benchmark", sort=True)
        write_table(pd.DataFrame({"checkpoint": "final", "benchmark": ["a", "b"], "accuracy": by["p"].mean().values,
                                  "pass_at_k": by["pass"].mean().values, "pass_metric": "pass@16",
                                  "greedy_accuracy": by["greedy"].mean().values}), run.eval)
    agg = summarize_runs(cfg, Paths(cfg)).set_index("method").loc["grpo_g8"]
    assert agg["greedy_wrong_share"] == 0.5 and agg["greedy_wrong_problems"] == 2
    assert agg["start_eval_greedy_wrong"] == pytest.approx((0.25 + 0.25) / 2)
    assert agg["start_eval_greedy_wrong_greedy"] == 0.0
    # seed 0 on {a/1, b/0}: p (0.5, 0.0), greedy (1, 0); seed 1: p (0.75, 0.5), greedy (1, 1)
    assert agg["eval_greedy_wrong_final"] == pytest.approx((0.25 + 0.625) / 2)
    assert agg["eval_greedy_wrong_greedy_final"] == pytest.approx(0.75)
    assert agg["eval_greedy_wrong_gain"] == pytest.approx(0.4375 - 0.25)
    assert agg["eval_greedy_wrong_greedy_gain"] == pytest.approx(0.75)
    # over benchmarks: seed 0 greedy (2/3, 0), seed 1 (2/3, 1); start (2/3, 0)
    assert agg["eval_greedy_final"] == pytest.approx((1 / 3 + 5 / 6) / 2)
    assert agg["eval_greedy_gain"] == pytest.approx((1 / 3 + 5 / 6) / 2 - 1 / 3)
    assert agg["eval_pass_final"] == pytest.approx((0.5 + 1.0) / 2) and agg["start_eval_pass"] == 0.75
    assert agg["eval_pass_final"] >= agg["eval_accuracy"] >= 0
    assert agg["pass_metric"] == "pass@16" and agg["protocol"] == "matched rollouts"
    assert {"rollouts_total", "wall_time_s"} <= set(agg.index)
    # a method spec with prompts_per_step (the matched-prompts protocol) says so
    class MatchedPrompts:  # the spec, with its prompts per step fixed
        def __init__(self, spec):
            self.spec, self.prompts_per_step = spec, 4

        def __getattr__(self, name):
            return getattr(self.spec, name)

    load = report.load_method
    monkeypatch.setattr(report, "load_method", lambda m: MatchedPrompts(load(m)))
    assert summarize_runs(cfg, Paths(cfg)).set_index("method").loc["grpo_g8", "protocol"] == "matched prompts"


def test_gain_intervals_are_t_intervals_over_seeds():
    """The gains' 95% CIs: a t-interval over seeds (as the studies'),
    a point when the seeds agree, NaN with one seed or a missing value."""
    from sparserl.engines.report import gain_intervals
    from sparserl.core.stats import t_interval
    runs = pd.DataFrame({"method": ["a"] * 3 + ["b"] + ["c"] * 2 + ["d"] * 2,
                         "eval_gain": [.05, .07, .06, .1, .02, .02, .01, .03],
                         "eval_greedy_gain": [.01, -.02, .04, .0, .03, .03, .01, np.nan]})
    ci = gain_intervals(runs).set_index("method")
    _, lo, hi = t_interval([.05, .07, .06])
    assert ci.loc["a", "eval_gain_ci_lo"] == pytest.approx(lo) and ci.loc["a", "eval_gain_ci_hi"] == pytest.approx(hi)
    assert lo > 0  # excludes 0
    _, glo, ghi = t_interval([.01, -.02, .04])
    assert ci.loc["a", "eval_greedy_gain_ci_lo"] == pytest.approx(glo) and glo < 0 < ghi
    assert np.isnan(ci.loc["b", "eval_gain_ci_lo"]) and np.isnan(ci.loc["b", "eval_gain_ci_hi"])
    assert ci.loc["c", "eval_gain_ci_lo"] == ci.loc["c", "eval_gain_ci_hi"] == pytest.approx(.02)
    assert np.isnan(ci.loc["d", "eval_greedy_gain_ci_lo"]) and not np.isnan(ci.loc["d", "eval_gain_ci_lo"])
    assert "eval_pass_gain_ci_lo" not in ci  # only the gains the runs have
