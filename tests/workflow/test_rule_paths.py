"""Commands take their paths from the DAG: each rule passes its inputs and outputs, and the
command writes where it is told (issue "Commands receive paths")."""
import re
from pathlib import Path

import pytest

from sparserl.cli import main

REPO = Path(__file__).resolve().parents[2]
CFG = str(REPO / "configs/tiny.yaml")

# the rules whose commands take their paths from the DAG, and the output each passes
# (critique.smk's paper-scale critique_train, `critique-openrlhf`, still finds its own paths)
RULES = {"critique.smk": ["critique_world", "critique_pretrain", "critique_start"],
         "ood.smk": ["ood_tasks", "ood_eval"], "tuning.smk": ["make_validation", "lr_tune_run", "lr_tuning"],
         "data.smk": ["make_tasks", "fetch_data"], "models.smk": ["fetch_models"],
         "policies.smk": ["train_tokenizer", "pretrain_policy", "passrate", "world_report", "passrate_summary"],
         "evaluation.smk": ["evaluate", "eval_summary"],
         "values.smk": ["v0_official", "v0_pool_embeddings", "v0_harvest_run", "v0_harvest_values",
                        "v0_harvest_values_shard", "v0_harvest_merge", "v0_harvest", "v0_embeddings", "v0_table",
                        "v0_ablations", "v0_routing"]}


def _shells(smk: str) -> dict[str, str]:
    """rule name -> its shell string (the concatenated literals)."""
    text = (REPO / "workflow/rules" / smk).read_text()
    out = {}
    for m in re.finditer(r"^\s*rule (\w+):\n(.*?)(?=^\s*(?:rule \w+:|def |if |else:|$(?![\s\S])))", text, re.M | re.S):
        lines = m.group(2).split("shell:", 1)[1].splitlines()[1:] if "shell:" in m.group(2) else []
        shell = []
        for line in lines:  # the string literals under `shell:`, up to the first other line
            if line.strip().startswith("#"):
                continue
            if not line.strip().startswith('"'):
                break
            shell += re.findall(r'"((?:[^"\\]|\\.)*)"', line)
        out[m.group(1)] = "".join(shell)
    return out


@pytest.mark.parametrize("smk, rule", [(f, r) for f, rules in RULES.items() for r in rules])
def test_each_rule_passes_its_outputs_and_log(smk, rule):
    shell = _shells(smk)[rule]
    assert shell, f"{smk}: rule {rule} has no shell"
    assert re.search(r"\{output[.}]|\{params\.(out|models)[:}]", shell), f"{rule} passes no output: {shell}"
    assert "{log}" in shell, f"{rule} writes no log: {shell}"


def _record(monkeypatch, module, name):
    import importlib
    seen = {}

    def fake(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
    monkeypatch.setattr(importlib.import_module(module), name, fake)
    return seen


def test_pretrain_command_hands_the_dag_paths_to_pretrain(monkeypatch):
    seen = _record(monkeypatch, "sparserl.models.policies", "pretrain")
    assert main(["pretrain", "--config", CFG, "--policy", "s", "--corpus", "c.parquet", "--tokenizer", "tok",
                 "--out", "p/s", "--snapshots", "p/s@p50", "p/s@p75"]) == 0
    assert seen["kwargs"] == {"threads": 1, "corpus": "c.parquet", "tokenizer": "tok", "out": "p/s",
                              "snapshots": ["p/s@p50", "p/s@p75"]}


def test_passrate_without_a_cache_rolls_out(monkeypatch):
    """Rule passrate passes `--cache {input.shared}`: empty unless the policy has a reference cache."""
    seen = _record(monkeypatch, "sparserl.evaluation", "measure_passrate")
    assert main(["passrate", "--config", CFG, "--policy", "m", "--policy-dir", "p/m", "--pool", "pool.parquet",
                 "--cache", "--out", "p/m.passrate.json"]) == 0
    assert seen["kwargs"]["cache"] is None and seen["kwargs"]["policy_dir"] == "p/m"


def test_harvest_run_lives_in_the_folder_of_its_final_output(monkeypatch):
    from sparserl.core.paths import RunPaths
    seen = {}

    def fake(cfg, policy, *, run_dir, threads=1):
        seen["run_dir"] = run_dir
        return RunPaths(run_dir, "grpo", 0)
    monkeypatch.setattr("sparserl.engines.harvest.run_harvest", fake)
    args = ["v0-harvest-run", "--config", CFG, "--policy", "s", "--out", "h/runs/s/final"]
    assert main(args + ["--rollouts", "h/runs/s/rollouts.parquet"]) == 0
    assert seen["run_dir"] == Path("h/runs/s")
    with pytest.raises(SystemExit, match="the run writes h/runs/s/rollouts.parquet"):
        main(args + ["--rollouts", "elsewhere/rollouts.parquet"])
    # OpenRLHF's harvest runs in the absolute folder (Ray's workers have their own cwd): the same files
    monkeypatch.setattr("sparserl.engines.harvest.run_harvest",
                        lambda cfg, policy, *, run_dir, threads=1: RunPaths(Path(run_dir).absolute(), "grpo", 0))
    assert main(args + ["--rollouts", "h/runs/s/rollouts.parquet"]) == 0


def test_benchmark_files_must_be_the_configs(tmp_path):
    with pytest.raises(SystemExit, match=r"evaluate --benchmarks: files \['b'\] are not the config's benchmarks"):
        main(["evaluate", "--config", CFG, "--policy", "s", "--policy-dir", "p/s", "--benchmarks", "x/b.parquet",
              "--out", str(tmp_path / "e.parquet"), "--curve", str(tmp_path / "c.parquet")])


@pytest.mark.e2e  # a tokenizer and four pre-training steps
def test_pretrain_writes_the_policy_and_snapshots_where_it_is_told(repo, tmp_path):
    from sparserl.core.artifacts import write_table
    from sparserl.core.config import load_config
    from sparserl.models.policies import pretrain
    from sparserl.models.tokenizer import train_tokenizer
    from sparserl.tasks import format_prompt, format_target, procedural
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")  # nothing may land here
    cfg["policies"] = {"s": {**cfg["policies"]["s"], "steps": 4}}
    cfg["pretrain"]["snapshots"] = [0.5]
    src, dst = tmp_path / "in", tmp_path / "out"
    corpus = procedural.make_pretrain_corpus(cfg)
    write_table(corpus, src / "corpus.parquet")
    train_tokenizer([format_prompt(cfg, p) + format_target(cfg, a) for p, a in zip(corpus["problem"], corpus["answer"])],
                    268, src / "tok", 24)
    with pytest.raises(ValueError, match=r"pretrain s: pretrain.snapshots asks for p50, but no snapshot dir"):
        pretrain(cfg, "s", corpus=src / "corpus.parquet", tokenizer=src / "tok", out=dst / "s", snapshots=[])
    out = pretrain(cfg, "s", corpus=src / "corpus.parquet", tokenizer=src / "tok", out=dst / "s",
                   snapshots=[dst / "s@p50"])
    assert out == dst / "s"
    assert (dst / "s" / "config.json").exists() and (dst / "s@p50" / "config.json").exists()
    assert not (tmp_path / "results").exists()
