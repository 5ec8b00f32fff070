"""BASIS Table 2 (out-of-domain evaluation): the harness command lines and the parsing of their
documented JSON layouts (paper scale), the reasoning-gym OOD families and their evaluation (tiny),
the figure, and the OOD jobs of the paper and tiny DAGs."""
import copy
import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from sparserl.core.artifacts import read_manifest, write_table
from sparserl.core.config import ConfigError, load_config
from sparserl.evaluation import ood
from sparserl.core.paths import Paths

MGSM2 = ["mgsm_native_cot_en", "mgsm_native_cot_de"]


@pytest.fixture
def paper(repo):
    return load_config([str(repo / "configs/paper.yaml")])


@pytest.fixture
def paper2(paper):
    """The paper config with MGSM cut to two languages, so the fixtures stay small."""
    c = copy.deepcopy(paper)
    c["ood"]["lm_eval"]["tasks"][1]["tasks"] = MGSM2
    return c


def lm_eval_results(scores: dict[str, float]) -> dict:
    """An lm-eval results_<date>.json as lm-eval 0.4 writes it (evaluator + EvaluationTracker):
    `results.<task>.<metric>,<filter>` with `<metric>_stderr,<filter>`, `n-samples`, `configs`..."""
    mmlu, mgsm_en, mgsm_de, ifeval = (scores[k] for k in ("mmlu_pro", "mgsm_en", "mgsm_de", "ifeval"))
    return {
        "results": {
            "mmlu_pro": {"alias": "mmlu_pro", "exact_match,custom-extract": mmlu,
                         "exact_match_stderr,custom-extract": 0.004},
            "mmlu_pro_math": {"alias": " - math", "exact_match,custom-extract": 0.9,
                              "exact_match_stderr,custom-extract": 0.008},
            "mgsm_native_cot_en": {"alias": "mgsm_native_cot_en", "exact_match,strict-match": 0.5,
                                   "exact_match_stderr,strict-match": 0.03,
                                   "exact_match,flexible-extract": mgsm_en,
                                   "exact_match_stderr,flexible-extract": 0.02},
            "mgsm_native_cot_de": {"alias": "mgsm_native_cot_de", "exact_match,strict-match": 0.4,
                                   "exact_match_stderr,strict-match": 0.03,
                                   "exact_match,flexible-extract": mgsm_de,
                                   "exact_match_stderr,flexible-extract": 0.02},
            "ifeval": {"alias": "ifeval", "prompt_level_strict_acc,none": ifeval,
                       "prompt_level_strict_acc_stderr,none": 0.018,
                       "inst_level_strict_acc,none": 0.88, "inst_level_strict_acc_stderr,none": "N/A",
                       "prompt_level_loose_acc,none": 0.86, "prompt_level_loose_acc_stderr,none": 0.015},
        },
        "groups": {"mmlu_pro": {"alias": "mmlu_pro", "exact_match,custom-extract": mmlu}},
        "group_subtasks": {"mmlu_pro": ["mmlu_pro_math"], "mgsm_native_cot_en": [], "ifeval": []},
        "configs": {"ifeval": {"task": "ifeval", "num_fewshot": 0}},
        "versions": {"mmlu_pro": 2.0, "ifeval": 4.0, "mgsm_native_cot_en": 4.0},
        "n-shot": {"mmlu_pro_math": 5, "ifeval": 0},
        "n-samples": {"mmlu_pro_math": {"original": 1351, "effective": 1351},
                      "mgsm_native_cot_en": {"original": 250, "effective": 250},
                      "mgsm_native_cot_de": {"original": 250, "effective": 250},
                      "ifeval": {"original": 541, "effective": 541}},
        "config": {"model": "vllm", "model_args": "pretrained=/ckpt,tensor_parallel_size=1", "batch_size": "auto"},
        "model_name": "/ckpt", "model_name_sanitized": "__ckpt", "date": 1764000000.0,
    }


def evalplus_results(statuses: list[tuple[str, str]], plus: float, base: float) -> dict:
    """An evalplus 0.3 `*.eval_results.json`: `eval` (task id -> its samples' base/plus statuses)
    and `pass_at_k.{base,plus}`."""
    return {"date": "2026-12-01 10:00", "hash": "abc",
            "eval": {f"Mbpp/{i}": [{"task_id": f"Mbpp/{i}", "solution": "def f(): ...", "base_status": b,
                                    "plus_status": p, "base_fail_tests": [], "plus_fail_tests": []}]
                     for i, (b, p) in enumerate(statuses)},
            "pass_at_k": {"base": {"pass@1": base}, "plus": {"pass@1": plus}}}


# --- paper scale: the command lines -----------------------------------------------------------

def test_lm_eval_command_line(paper):
    argv = ood.lm_eval_argv(paper, "/runs/grpo_g8/seed0/final", "/scratch/lm_eval")
    assert argv[:3] == ["lm_eval", "--model", "vllm"]
    margs = dict(kv.split("=", 1) for kv in argv[argv.index("--model_args") + 1].split(","))
    assert margs == {"pretrained": "/runs/grpo_g8/seed0/final", "tensor_parallel_size": "1", "dtype": "bfloat16",
                     "gpu_memory_utilization": "0.85", "max_model_len": "10240"}
    tasks = argv[argv.index("--tasks") + 1].split(",")
    assert tasks[0] == "mmlu_pro" and tasks[-1] == "ifeval" and len(tasks) == 13
    assert [t for t in tasks if t.startswith("mgsm_")] == [f"mgsm_native_cot_{x}" for x in
                                                          "bn de en es fr ja ru sw te th zh".split()]
    assert argv[argv.index("--batch_size") + 1] == "auto"
    assert argv[argv.index("--output_path") + 1] == "/scratch/lm_eval"
    assert "--apply_chat_template" in argv and "--fewshot_as_multiturn" in argv
    c = copy.deepcopy(paper)
    c["ood"]["lm_eval"].update(model_args={"tensor_parallel_size": 2, "data_parallel_size": 4},
                               apply_chat_template=False, gen_kwargs="max_gen_toks=4096")
    argv = ood.lm_eval_argv(c, "m", "o")
    margs = dict(kv.split("=", 1) for kv in argv[argv.index("--model_args") + 1].split(","))
    assert margs["tensor_parallel_size"] == "2" and margs["data_parallel_size"] == "4"
    assert "--apply_chat_template" not in argv and argv[argv.index("--gen_kwargs") + 1] == "max_gen_toks=4096"


def test_evalplus_command_line(paper):
    argv = ood.evalplus_argv(paper, "/runs/start", "humaneval", "/scratch/ep")
    assert argv == ["evalplus.evaluate", "--model", "/runs/start", "--dataset", "humaneval", "--backend", "vllm",
                    "--root", "/scratch/ep", "--tp", "1", "--dtype", "bfloat16", "--greedy"]
    with pytest.raises(ConfigError, match="unknown dataset 'apps'"):
        ood.evalplus_argv(paper, "m", "apps", "r")


def test_harness_dry_run_names_each_runs_checkpoint(repo, paper, capsys, monkeypatch, tmp_path):
    from sparserl.cli import main
    monkeypatch.chdir(tmp_path)
    cfg = str(repo / "configs/paper.yaml")
    # the checkpoint is the DAG's (rule ood_lm_eval's input): the command evaluates what it is given
    assert main(["ood-harness", "--config", cfg, "--tool", "lm_eval", "--policy", "basis_grid_grpo_g1_vanilla/seed0",
                 "--checkpoint", "results/paper/rl/vanilla_g1/seed0/final",
                 "--out", "results/paper/ood/harness/basis_grid_grpo_g1_vanilla/seed0/lm_eval.json", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "pretrained=results/paper/rl/vanilla_g1/seed0/final," in out and out.startswith("lm_eval --model vllm")
    assert f"{tmp_path}/results/paper/ood/harness/basis_grid_grpo_g1_vanilla/seed0/<scratch>/lm_eval" in out  # beside --out
    assert main(["ood-harness", "--config", cfg, "--tool", "evalplus", "--dataset", "mbpp", "--policy", "start",
                 "--checkpoint", "models/Qwen/Qwen3-4B-Instruct-2507",
                 "--out", "results/paper/ood/harness/start/evalplus_mbpp.json", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--model models/Qwen/Qwen3-4B-Instruct-2507 --dataset mbpp --backend vllm" in out  # fetch_models' copy
    assert [p for p, _, _ in ood.policies(paper)] == ["start"] + [f"{m}/seed0" for m in ood.T2_METHODS]


# --- paper scale: parsing ------------------------------------------------------------------------

def test_parse_lm_eval_reads_each_benchmarks_metric(paper2):
    obj = lm_eval_results({"mmlu_pro": 0.62, "mgsm_en": 0.9, "mgsm_de": 0.8, "ifeval": 0.81})
    rows = {r["benchmark"]: r for r in ood.parse_lm_eval(obj, paper2)}
    assert list(rows) == ["MMLU-Pro", "MGSM", "IFEval"]
    assert rows["MMLU-Pro"]["score"] == 0.62 and rows["MMLU-Pro"]["stderr"] == 0.004
    assert rows["MMLU-Pro"]["metric"] == "exact_match,custom-extract"
    # MGSM: the unweighted mean of its languages (flexible-extract, not strict-match)
    assert rows["MGSM"]["score"] == pytest.approx(0.85) and rows["MGSM"]["problems"] == 500
    assert rows["MGSM"]["stderr"] == pytest.approx(np.sqrt(2 * 0.02 ** 2) / 2)
    assert rows["IFEval"]["score"] == 0.81 and rows["IFEval"]["metric"] == "prompt_level_strict_acc,none"


def test_parse_lm_eval_errors_name_the_file_and_the_fix(paper2):
    obj = lm_eval_results({"mmlu_pro": 0.6, "mgsm_en": 0.9, "mgsm_de": 0.8, "ifeval": 0.8})
    del obj["results"]["mgsm_native_cot_de"]
    with pytest.raises(ValueError, match=r"f\.json: task 'mgsm_native_cot_de' \(ood.lm_eval benchmark 'MGSM'\)"):
        ood.parse_lm_eval(obj, paper2, "f.json")
    obj = lm_eval_results({"mmlu_pro": 0.6, "mgsm_en": 0.9, "mgsm_de": 0.8, "ifeval": 0.8})
    c = copy.deepcopy(paper2)
    c["ood"]["lm_eval"]["tasks"][2]["metric"] = "prompt_level_strict_acc"  # the filter missing
    with pytest.raises(ValueError, match=r"no metric 'prompt_level_strict_acc' \(has \[.*'prompt_level_strict_acc,none'"):
        ood.parse_lm_eval(obj, c, "f.json")
    with pytest.raises(ValueError, match="no `results` object"):
        ood.parse_lm_eval({"pass_at_k": {}}, paper2, "f.json")


def test_parse_evalplus_reads_plus_pass_at_1(paper):
    obj = evalplus_results([("pass", "pass"), ("pass", "fail"), ("fail", "fail"), ("pass", "pass")],
                           plus=0.5, base=0.75)
    (row,) = ood.parse_evalplus(obj, "mbpp", paper)
    assert row["benchmark"] == "MBPP+" and row["score"] == 0.5 and row["problems"] == 4
    assert row["stderr"] == pytest.approx(np.std([1, 0, 0, 1], ddof=1) / 2)
    c = copy.deepcopy(paper)
    c["ood"]["evalplus"]["tests"] = "base"
    (row,) = ood.parse_evalplus(obj, "mbpp", c)
    assert row["benchmark"] == "MBPP" and row["score"] == 0.75
    del obj["pass_at_k"]  # evalplus without stored pass@k: the statuses give it
    assert ood.parse_evalplus(obj, "mbpp", paper)[0]["score"] == 0.5
    obj["pass_at_k"] = {"plus": {"pass@1": 0.75}}
    with pytest.raises(ValueError, match=r"x.json: pass_at_k.plus.pass@1 = 0.75 but its `eval` statuses give 0.5"):
        ood.parse_evalplus(obj, "mbpp", paper, "x.json")
    with pytest.raises(ValueError, match="no `eval` object"):
        ood.parse_evalplus({"pass_at_k": {}}, "mbpp", paper, "x.json")


FAKE_HARNESS = textwrap.dedent("""
    import json, os, sys
    argv = sys.argv[1:]
    mode, payload = os.environ["FAKE_MODE"], json.loads(os.environ["FAKE_PAYLOAD"])
    if mode == "fail":
        sys.exit(3)
    if "--output_path" in argv:   # lm_eval: <output_path>/<model sanitized>/results_<date>.json
        d = os.path.join(argv[argv.index("--output_path") + 1], "__abs__ckpt")
        name = "results_2026-12-01T10-00-00.000001.json"
    else:                         # evalplus: <root>/<dataset>/<model id>_vllm_temp_0.0.eval_results.json
        d = os.path.join(argv[argv.index("--root") + 1], argv[argv.index("--dataset") + 1])
        name = "ckpt_vllm_temp_0.0.eval_results.json"
    os.makedirs(d, exist_ok=True)
    if mode == "ok":
        json.dump(payload, open(os.path.join(d, name), "w"))
""")


def test_run_harness_copies_the_results_json_and_cleans_its_scratch(paper2, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE_HARNESS)
    cfg = copy.deepcopy(paper2)
    cfg["ood"]["lm_eval"]["command"] = [sys.executable, str(fake)]
    cfg["ood"]["evalplus"]["command"] = [sys.executable, str(fake)]
    lm = lm_eval_results({"mmlu_pro": 0.6, "mgsm_en": 0.9, "mgsm_de": 0.8, "ifeval": 0.8})
    monkeypatch.setenv("FAKE_MODE", "ok")
    monkeypatch.setenv("FAKE_PAYLOAD", json.dumps(lm))
    out = ood.run_harness(cfg, "grpo_g8/seed0", "lm_eval", "ckpt", Paths(cfg).ood.harness("grpo_g8/seed0", "lm_eval"))
    assert out == Paths(cfg).ood.harness("grpo_g8/seed0", "lm_eval")
    assert json.loads(out.read_text())["results"]["ifeval"]["prompt_level_strict_acc,none"] == 0.8
    assert sorted(p.name for p in out.parent.iterdir()) == ["lm_eval.json"]  # scratch removed
    monkeypatch.setenv("FAKE_PAYLOAD", json.dumps(evalplus_results([("pass", "pass")], 1.0, 1.0)))
    out = ood.run_harness(cfg, "start", "evalplus", "ckpt", Paths(cfg).ood.harness("start", "evalplus", "humaneval"),
                          dataset="humaneval")
    assert out.name == "evalplus_humaneval.json" and json.loads(out.read_text())["pass_at_k"]["plus"]["pass@1"] == 1.0
    monkeypatch.setenv("FAKE_MODE", "silent")  # exits 0, writes nothing
    with pytest.raises(FileNotFoundError, match="lm_eval wrote no results"):
        ood.run_harness(cfg, "start", "lm_eval", "ckpt", Paths(cfg).ood.harness("start", "lm_eval"))
    monkeypatch.setenv("FAKE_MODE", "fail")
    with pytest.raises(RuntimeError, match="exited with 3"):
        ood.run_harness(cfg, "start", "evalplus", "ckpt", Paths(cfg).ood.harness("start", "evalplus", "mbpp"),
                        dataset="mbpp")
    assert not Paths(cfg).ood.harness("start", "lm_eval").exists()
    monkeypatch.setenv("FAKE_MODE", "ok")  # a results file without the configured metric fails the job
    bad = lm_eval_results({"mmlu_pro": 0.6, "mgsm_en": 0.9, "mgsm_de": 0.8, "ifeval": 0.8})
    del bad["results"]["ifeval"]
    monkeypatch.setenv("FAKE_PAYLOAD", json.dumps(bad))
    with pytest.raises(ValueError, match="task 'ifeval'"):
        ood.run_harness(cfg, "start", "lm_eval", "ckpt", Paths(cfg).ood.harness("start", "lm_eval"))
    assert not Paths(cfg).ood.harness("start", "lm_eval").exists()


def test_harness_table_and_table2(paper2, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    O = Paths(paper2).ood
    mmlu = {"start": 0.60, "grpo_g8": 0.66, "basis_grid_grpo_g1_vanilla": 0.50, "basis_grid_grpo_g1_rpp": 0.62,
            "basis_grid_grpo_g1_basis": 0.65}
    for label, tool, ds in ood.harness_outputs(paper2):
        m = ood.parse_label(label)[0]
        obj = (lm_eval_results({"mmlu_pro": mmlu[m], "mgsm_en": 0.9, "mgsm_de": 0.7, "ifeval": 0.8}) if tool == "lm_eval"
               else evalplus_results([("pass", "pass"), ("pass", "fail")], 0.5, 1.0))
        O.harness(label, tool, ds).parent.mkdir(parents=True, exist_ok=True)
        O.harness(label, tool, ds).write_text(json.dumps(obj))
    files = [O.harness(label, tool, ds) for label, tool, ds in ood.harness_outputs(paper2)]
    df = ood.harness_table(paper2, files, O.table())
    assert len(df) == 5 * 5 and set(df["benchmark"]) == {"MMLU-Pro", "MGSM", "IFEval", "HumanEval+", "MBPP+"}
    assert read_manifest(O.table())["rows"] == 25
    t2 = ood.t2_table(df, ood.T2_METHODS, "basis_grid_grpo_g1_basis").set_index("row")
    assert list(t2.index[:5]) == ["start"] + ood.T2_METHODS
    assert t2.loc["grpo_g8", "Avg"] == pytest.approx(np.mean([0.66, 0.8, 0.8, 0.5, 0.5]))
    assert t2.loc["Δ vs basis_grid_grpo_g1_vanilla", "MMLU-Pro"] == pytest.approx(0.15)
    assert t2.loc["Δ vs grpo_g8", "Avg"] == pytest.approx(-0.01 / 5)
    assert "Δ vs start" not in t2.index
    O.harness("start", "evalplus", "mbpp").unlink()
    with pytest.raises(FileNotFoundError, match="evalplus_mbpp.json: missing"):
        ood.harness_table(paper2, files, O.table())
    with pytest.raises(ValueError, match=r"start/evalplus_humaneval.json is not the lm_eval JSON of start"):
        ood.harness_table(paper2, [files[1], files[0], *files[2:]], O.table())  # out of harness_outputs order


def test_settings_refuse_methods_that_no_run_trains(paper):
    c = copy.deepcopy(paper)
    c["ood"]["methods"] = ["grpo_g8", "not_trained"]
    with pytest.raises(ConfigError, match=r"ood.methods: \['not_trained'\] are not in rl.methods"):
        ood.ood_settings(c)
    c["ood"]["methods"], c["ood"]["basis_method"] = ["grpo_g8"], "basis_grid_grpo_g1_basis"
    with pytest.raises(ConfigError, match="ood.basis_method"):
        ood.ood_settings(c)


# --- tiny scale: reasoning-gym families ----------------------------------------------------------

@pytest.fixture
def tiny(repo, tmp_path, monkeypatch):
    """The tiny config's OOD families at 12 problems each, run from an empty directory."""
    monkeypatch.chdir(tmp_path)
    c = load_config([str(repo / "configs/tiny.yaml")])
    for b in c["ood"]["benchmarks"]:
        b["size"] = 12
    c["ood"]["protocol"] = {"k": 2}
    return c


@pytest.fixture(scope="module")
def world_tokenizer(tmp_path_factory):
    """A BPE trained on a small corpus of the tiny world's rows, and that corpus."""
    from sparserl.models.tokenizer import train_tokenizer
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(400):
        a, b, c = rng.integers(0, 10, 3)
        op1, op2 = rng.choice(["+", "-", "*"], 2)
        expr = f"{a} {op1} {b} {op2} {c}"
        rows.append((expr, str(eval(expr))))
    corpus = pd.DataFrame(rows, columns=["problem", "answer"])
    texts = [f"Q: {p} =\nA: \\boxed{{{a}}}" for p, a in rows]
    tok = train_tokenizer(texts, 268, tmp_path_factory.mktemp("tok") / "tokenizer", 30)
    return tok, corpus


def test_tiny_families_are_held_out_and_count_unseen_prompt_tokens(tiny, world_tokenizer):
    tok, corpus = world_tokenizer
    tasks = ood.build_ood_tasks(tiny, tok.backend_tokenizer, corpus)
    assert list(tasks) == [b["name"] for b in tiny["ood"]["benchmarks"]]
    from sparserl.tasks.procedural import split_of, task_split
    for name, df in tasks.items():
        assert len(df) == 12 and df["problem"].is_unique
        assert all(split_of(p, task_split(tiny["tasks"])) == "eval" for p in df["problem"])
        assert not set(df["problem"]) & set(corpus["problem"])
    share = {n: df["unseen_prompt_tokens"].sum() / df["prompt_tokens"].sum() for n, df in tasks.items()}
    prod, eq, seq = (b["name"] for b in tiny["ood"]["benchmarks"])
    assert share[prod] == 0  # digits and '*': every token seen
    assert share[eq] > 0 and share[seq] > 0  # a variable's letter; commas and '?'
    assert all(re.fullmatch(r"[a-z] [+-] \d+ = -?\d+|\d+ [+-] [a-z] = -?\d+", p) for p in tasks[eq]["problem"])


def test_a_family_whose_answers_the_policy_cannot_write_is_refused(tiny, world_tokenizer):
    tok, corpus = world_tokenizer
    tiny["ood"]["benchmarks"] = [{"name": "decimals", "generator": "decimal_chain_sum", "size": 4,
                                  "params": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}]
    with pytest.raises(ConfigError, match=r"'decimals' \(decimal_chain_sum\): the answer .* needs the token '\.'"):
        ood.build_ood_tasks(tiny, tok.backend_tokenizer, corpus)
    tiny["ood"]["benchmarks"] = [dict(tiny["tasks"]["benchmarks"][0], size=4)]
    with pytest.raises(ConfigError, match="also an in-domain benchmark"):
        ood.build_ood_tasks(tiny, tok.backend_tokenizer, corpus)


def test_evaluate_ood_rolls_a_shared_checkpoint_out_once(tiny, world_tokenizer, tmp_path):
    import torch
    from sparserl.models.policies import build_model
    tok, corpus = world_tokenizer
    torch.manual_seed(0)
    model = build_model({"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "ffn_size": 64}, tok,
                        tiny["tokenizer"]["max_length"])
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    tiny["ood"]["benchmarks"] = tiny["ood"]["benchmarks"][:2]
    tasks = []
    for name, df in ood.build_ood_tasks(tiny, tok.backend_tokenizer, corpus).items():
        tasks.append(write_table(df, Paths(tiny).ood.task(name), cfg=tiny))
    tiny["verifier"] = {"workers": 1, "timeout_s": 5.0}
    out = ood.evaluate_ood(tiny, [("start", "start", None, str(ckpt)),
                                  ("basis_grid_grpo_g1_vanilla/seed0", "basis_grid_grpo_g1_vanilla", 0, str(ckpt)),
                                  ("vanilla_g1/seed0", "vanilla_g1", 0, str(ckpt))], tasks, Paths(tiny).ood.table(),
                           threads=1)
    assert len(out) == 3 * 2 and set(out["metric"]) == {"mean@2"} and (out["problems"] == 12).all()
    assert read_manifest(Paths(tiny).ood.table())["checkpoints_rolled_out"] == 1
    by = out.pivot(index="policy", columns="benchmark", values="score")
    assert (by.nunique() == 1).all()  # one checkpoint, one set of rollouts
    assert out["seed"].isna().sum() == 2 and str(out["seed"].dtype) == "Int64"
    assert ((out["score"] >= 0) & (out["score"] <= 1)).all()
    # a family whose prompts + the response cap outrun the checkpoint's positions is refused first
    conf = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**conf, "max_position_embeddings": 16}))
    with pytest.raises(ConfigError, match=r"ood.benchmarks 'products_3x1digit': prompts of up to \d+ tokens"):
        ood.evaluate_ood(tiny, [("start", "start", None, str(ckpt))], tasks, Paths(tiny).ood.table())


def test_figure_draws_table2_with_basis_deltas(repo, tmp_path, monkeypatch):
    from sparserl.cli.figures import draw_figure
    from sparserl.figures import list_figures
    monkeypatch.chdir(tmp_path)
    cfg = load_config([str(repo / "configs/tiny.yaml")])
    cfg["rl"]["seeds"] = [0, 1]
    assert "basis/t2_ood" in [f.id for f in list_figures(cfg)]
    rows = []
    base = {"start": 0.2, "grpo_g8": 0.3, "basis_grid_grpo_g1_vanilla": 0.25, "basis_grid_grpo_g1_rpp": 0.28,
            "basis_grid_grpo_g1_basis": 0.33}
    for label, m, s in ood.policies(cfg):
        for j, b in enumerate(["products_3x1digit", "equations_1var", "sequences_4term"]):
            rows.append({"suite": "reasoning_gym", "benchmark": b, "metric": "mean@16", "policy": label, "method": m,
                         "seed": s, "score": base[m] + 0.1 * j + 0.01 * (s or 0), "problems": 128})
    write_table(ood.to_table(rows), Paths(cfg).ood.table(), cfg=cfg)
    png = draw_figure("basis/t2_ood", cfg, Paths(cfg))
    assert png.resolve() == tmp_path / "paper_figures/tiny/basis/t2_ood.png" and png.stat().st_size > 0
    csv = pd.read_csv(png.with_suffix(".csv")).set_index("row")
    assert list(csv.index) == ["start"] + ood.T2_METHODS + [f"Δ vs {m}" for m in ood.T2_METHODS[:3]]
    assert csv.loc["grpo_g8", "seeds"] == 2 and csv.loc["start", "seeds"] == 1
    assert csv.loc["grpo_g8", "equations_1var"] == pytest.approx(0.405)
    assert csv.loc["Δ vs basis_grid_grpo_g1_vanilla", "Avg"] == pytest.approx(0.08)
    assert csv.loc["grpo_g8", "Avg sd"] == pytest.approx(np.std([0.4, 0.41], ddof=1))


# --- the DAG -------------------------------------------------------------------------------------

def snakemake(repo, workdir, *args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600)


def _blocks(log: str, rule: str) -> list[str]:
    return [b for b in log.split("\n\n") if re.search(rf"^(?:local)?rule {rule}:", b, re.M)]


@pytest.mark.e2e  # DAG dry run
def test_paper_dag_runs_each_harness_on_each_checkpoint_on_one_gpu(repo, tmp_path):
    out = snakemake(repo, tmp_path, "--profile", "slurm", "-n", "results/paper/ood/ood.parquet")
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    labels = ["start"] + [f"{m}/seed0" for m in ood.T2_METHODS]
    lm, ep = _blocks(log, "ood_lm_eval"), _blocks(log, "ood_evalplus")
    assert sorted(re.search(r"wildcards: policy=(\S+)", b).group(1) for b in lm) == sorted(labels)
    assert len(ep) == 2 * len(labels)
    for b in lm + ep:
        res = re.search(r"resources: (.*)", b).group(1)
        for want in ("gpu=1", "runtime=240", "cpus_per_task=16", "slurm_partition=gpu", "mem_mb=128000"):
            assert want in res, (want, res)
        assert "ood-harness --config " in b
    # BASIS's vanilla G=1 cell repeats vanilla_g1's spec: that run's final checkpoint is evaluated
    vanilla = next(b for b in lm if "policy=basis_grid_grpo_g1_vanilla/seed0" in b)
    assert "results/paper/rl/vanilla_g1/seed0/final" in re.search(r"input: (.*)", vanilla).group(1)
    assert ("--checkpoint results/paper/rl/vanilla_g1/seed0/final "
            "--out results/paper/ood/harness/basis_grid_grpo_g1_vanilla/seed0/lm_eval.json") in vanilla
    start = next(b for b in lm if re.search(r"policy=start$", b, re.M))
    assert re.search(r"input: models/Qwen/Qwen3-4B-Instruct-2507$", start, re.M)  # the hub policy's local copy
    assert "--checkpoint models/Qwen/Qwen3-4B-Instruct-2507 " in start
    (table,) = _blocks(log, "ood_table")
    assert "gpu=" not in re.search(r"resources: (.*)", table).group(1)
    assert "rule ood_eval:" not in log and "rule ood_tasks:" not in log


@pytest.mark.e2e  # DAG dry run
def test_tiny_dag_builds_the_ood_table_from_the_four_runs(repo, tmp_path):
    out = snakemake(repo, tmp_path, "--cores", "1", "-n", "-p", "results/tiny/ood/ood.parquet")
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    (ev,) = _blocks(log, "ood_eval")
    ins = re.search(r"input: (.*)", ev).group(1)
    for run in ("grpo_g8", "vanilla_g1", "reinforce_pp_g1", "basis_grid_grpo_g1_basis"):
        assert f"results/tiny/rl/{run}/seed0/final" in ins
    assert "results/tiny/policies/s" in ins and "ood/tasks/equations_1var.parquet" in ins
    assert "basis_grid_grpo_g1_vanilla" not in ins  # its run is vanilla_g1's
    # the command gets the DAG's paths: each label's checkpoint (vanilla's is vanilla_g1's run) and the table
    assert ("--policies start=results/tiny/policies/s grpo_g8/seed0=results/tiny/rl/grpo_g8/seed0/final "
            "basis_grid_grpo_g1_vanilla/seed0=results/tiny/rl/vanilla_g1/seed0/final ") in ev
    assert "--out results/tiny/ood/ood.parquet " in ev
    (tasks,) = _blocks(log, "ood_tasks")
    assert "results/tiny/tokenizer" in tasks and "ood-tasks --config" in tasks
    assert "--tokenizer results/tiny/tokenizer --corpus results/tiny/tasks/pretrain_corpus.parquet" in tasks
    assert "--out results/tiny/ood/tasks/" in tasks
