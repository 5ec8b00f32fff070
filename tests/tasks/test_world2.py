"""World 2.0 (sparserl.tasks.worked): templates, systematic slips, worked answers."""
import copy
import hashlib
import itertools

import numpy as np
import pandas as pd
import pytest

from sparserl.core.config import ConfigError, load_config
from sparserl.tasks import corpus_targets, format_prompt, procedural, worked
from helpers.split_checks import assert_split_guarantees


def _cfg(repo, **world):
    cfg = copy.deepcopy(load_config(repo / "configs/tiny.yaml"))
    cfg["tasks"]["world"].update(world)
    cfg["tasks"]["pretrain_corpus_size"] = 3000
    cfg["tasks"]["train_pool"]["size"] = 300
    for b in cfg["tasks"]["benchmarks"]:
        b["size"] = 40
    return cfg


def test_world2_is_the_world_of_tiny_and_small_and_world1_overlays_it_back(repo):
    """World 2.0 is tiny's and small's world; configs/overlays/world1.yaml gives either world 1
    back, and with configs/overlays/world1_tiny.yaml tiny's world-1 budgets too."""
    w2 = {"slip_share": 0.3, "slip_rate": 0.65, "noise": 0.1, "salt": 1}
    small = load_config(repo / "configs/small.yaml")
    tiny = load_config(repo / "configs/tiny.yaml")
    for cfg in (small, tiny):
        assert worked.settings(cfg["tasks"]) == w2
        assert cfg["rollout"]["max_new_tokens"] >= 48 and cfg["tokenizer"]["max_length"] >= 72
        assert cfg["pretrain"]["length_chunks"] > 1
    # the same levels, tiny's benchmarks smaller
    assert tiny["tasks"]["train_pool"] == small["tasks"]["train_pool"]
    assert [b["name"] for b in tiny["tasks"]["benchmarks"]] == [b["name"] for b in small["tasks"]["benchmarks"]]
    assert all(b["size"] < s["size"] for b, s in zip(tiny["tasks"]["benchmarks"], small["tasks"]["benchmarks"]))
    w1 = "configs/overlays/world1.yaml"
    old_small = load_config([repo / "configs/small.yaml", repo / w1])
    old_tiny = load_config([repo / "configs/tiny.yaml", repo / w1, repo / "configs/overlays/world1_tiny.yaml"])
    for old in (old_small, old_tiny):
        assert worked.settings(old["tasks"]) is None
        assert old["tasks"]["pretrain_noise"] == {"rate": 0.5, "kind": "off_by_one"}
        assert old["tokenizer"]["max_length"] == 30 and old["rollout"]["max_new_tokens"] == 12
        assert old["pretrain"]["length_chunks"] == 1
    for k in ("pretrain_noise", "pretrain_extra", "train_pool", "benchmarks"):
        assert old_small["tasks"][k] == old_tiny["tasks"][k], k
    # world 1's tiny budgets: policy s pre-trained 1232 steps, RL 60 steps at 1.5e-4
    assert old_tiny["policies"]["s"]["steps"] == 1232 and old_tiny["policies"]["m"]["hidden_size"] == 128
    assert (old_tiny["rl"]["steps"], old_tiny["rl"]["lr"]) == (60, 1.5e-4)
    assert (old_small["rl"]["steps"], old_small["rl"]["lr"]) == (small["rl"]["steps"], small["rl"]["lr"])


def test_templates_are_deterministic_and_read_the_pitfall():
    assert worked.template("2 + 3 * 4") == "+*:p"          # left to right: 20, not 14
    assert worked.template("2 * 3 + 1") == "*+:"           # left to right agrees; no carry
    assert worked.template("7 + 5") == "+:c"
    assert worked.template("52 - 38") == "-:b"
    assert worked.template("3 - 8") == "-:n"
    assert worked.template("9 - 3") == "-:"
    assert worked.template("0 + 3 * 1") == "+*:"           # left to right is equal here: no p
    assert worked.value("2 + 3 * 4 - 5") == 9
    assert worked.steps(*worked.parse("2 + 3 * 4 - 5")) == [(3, "*", 4, 12), (2, "+", 12, 14), (14, "-", 5, 9)]
    assert [worked.template(p) for p in ("47 + 38", "47 + 38")] == ["+:c", "+:c"]
    with pytest.raises(ValueError, match="problem '2 / 3'"):
        worked.parse("2 / 3")
    with pytest.raises(ValueError, match="parentheses"):
        worked.parse("(2 + 3) * 4")


def test_slip_share_follows_the_template_hash():
    # every operator sequence of up to 5 terms with every pitfall: a large template population
    pop = ["".join(ops) + ":" + k for n in range(1, 6) for ops in itertools.product("+-*", repeat=n)
           for k in ("p", "c", "b", "n")]
    for share in (0.1, 0.3, 0.6):
        got = np.mean([worked.is_slip_template(t, share) for t in pop])
        assert abs(got - share) < 0.05, (share, got)
        # the hash alone decides: the same answer every time, another salt another draw
        assert [worked.is_slip_template(t, share) for t in pop] == \
               [worked.is_slip_template(t, share) for t in pop]
    assert [worked.is_slip_template(t, 0.3, 1) for t in pop] != [worked.is_slip_template(t, 0.3) for t in pop]
    assert not worked.is_slip_template("+:", 1.0)         # no pitfall, no slip
    h = int(hashlib.sha1(b"0:+*:p").hexdigest()[:8], 16) % 10_000
    assert worked.is_slip_template("+*:p", 0.3) == (h < 3000)


@pytest.mark.parametrize("problem", ["2 + 3 * 4", "7 + 5", "52 - 38", "3 - 8 + 4", "47 + 38 - 12",
                                     "1 - 5 - 2 * 9", "9 + 9 + 5 * 1"])
def test_slipped_answers_are_wrong_and_the_same_each_time(problem):
    right = worked.value(problem)
    slipped = worked.slipped_steps(problem)
    assert slipped[-1][3] != right
    assert worked.slipped_steps(problem) == slipped
    kind = worked.slip_kind(worked.template(problem))
    if kind == "p":
        assert slipped == worked.steps(*worked.parse(problem), left_to_right=True)
    assert worked.slipped_steps("2 + 3 * 4")[-1][3] == 20   # (2 + 3) * 4
    assert worked.slipped_steps("7 + 5")[-1][3] == 2        # the carry dropped
    assert worked.slipped_steps("52 - 38")[-1][3] == 24     # the borrow forgotten
    assert worked.slipped_steps("3 - 8")[-1][3] == 5        # the minus sign dropped


def test_corpus_rows_carry_their_templates_slip(repo):
    cfg = _cfg(repo)
    corpus = procedural.make_pretrain_corpus(cfg)
    for col in ("clean_answer", "template", "slip", "slip_template", "target", "noisy"):
        assert col in corpus.columns
    assert (corpus["template"] == [worked.template(p) for p in corpus["problem"]]).all()
    # slips only on slip templates, at about slip_rate there; every slip is wrong and systematic
    assert not corpus.loc[~corpus["slip_template"], "slip"].any()
    rate = corpus.loc[corpus["slip_template"], "slip"].mean()
    assert abs(rate - 0.65) < 0.05
    slipped = corpus[corpus["slip"]]
    assert (slipped["answer"] != slipped["clean_answer"]).all()
    assert (slipped["answer"] == [str(worked.slipped_steps(p)[-1][3]) for p in slipped["problem"]]).all()
    # slip templates are unslipped otherwise; the others are off by one at about `noise`
    clean_slip = corpus[corpus["slip_template"] & ~corpus["slip"]]
    assert (clean_slip["answer"] == clean_slip["clean_answer"]).all()
    other = corpus[~corpus["slip_template"]]
    off = other["answer"].astype(int) - other["clean_answer"].astype(int)
    assert set(off.unique()) <= {-1, 0, 1} and abs((off != 0).mean() - 0.1) < 0.03
    # gold answers by the usual precedence (reasoning-gym's basic_arithmetic goes left to right)
    assert (corpus["clean_answer"] == [str(eval(p)) for p in corpus["problem"]]).all()
    assert procedural.make_pretrain_corpus(cfg).equals(corpus)


def test_worked_targets_end_in_the_boxed_answer_and_are_15_to_30_tokens(repo, tmp_path):
    from sparserl.grading.verifier import extract_boxed
    from sparserl.models.tokenizer import train_tokenizer
    cfg = _cfg(repo)
    corpus = procedural.make_pretrain_corpus(cfg)
    targets = corpus_targets(cfg, corpus)
    assert all(extract_boxed(t) == a for t, a in zip(targets, corpus["answer"]))
    assert targets[0].startswith(" ") and targets[0].endswith("}")
    tok = train_tokenizer([format_prompt(cfg, p) + t for p, t in zip(corpus["problem"], targets)],
                          cfg["tokenizer"]["vocab_size"], tmp_path / "tok", cfg["tokenizer"]["max_length"])
    n = pd.Series([len(tok(t, add_special_tokens=False)["input_ids"]) for t in targets],
                  index=corpus["source"])
    means = n.groupby(level=0).mean()
    # pool levels of two and three terms sit in 15-30; the easiest is a token or two short, the
    # four- and five-term ones longer (their steps)
    assert 15 <= means["add_sub_2x2digit"] <= 30 and 15 <= means["arith_3x1digit"] <= 30
    assert 15 <= means["add_sub_3x2digit"] <= 30
    assert 12 <= means["add_sub_2x1digit"] < 16
    assert 15 <= n.mean() <= 32
    assert n.max() + max(len(tok(format_prompt(cfg, p))["input_ids"]) for p in corpus["problem"]) \
        <= cfg["tokenizer"]["max_length"] + 4


def test_world2_keeps_the_split_guarantees(repo):
    cfg = _cfg(repo)
    pool, benches = assert_split_guarantees(cfg)
    for df in [pool, *benches.values()]:
        assert (df["answer"] == [str(worked.value(p)) for p in df["problem"]]).all()
    # the pool spans the levels, easiest to hardest
    assert pool["source"].nunique() == len(cfg["tasks"]["train_pool"]["levels"])


def test_world1_artifacts_do_not_read_world2(repo):
    cfg = load_config(repo / "configs/smoke.yaml")
    corpus = procedural.make_pretrain_corpus(cfg)
    assert "target" not in corpus.columns and "template" not in corpus.columns
    assert corpus_targets(cfg, corpus) == [f" \\boxed{{{a}}}" for a in corpus["answer"]]


@pytest.mark.parametrize("key,value,match", [
    ("slip_share", 1.5, r"tasks\.world\.slip_share"),
    ("slip_rate", -0.1, r"tasks\.world\.slip_rate"),
    ("noise", "high", r"tasks\.world\.noise"),
    ("salt", 0.5, r"tasks\.world\.salt"),
    ("slips", 0.3, r"tasks\.world\.slips"),
])
def test_bad_world_values_name_the_key(repo, tmp_path, key, value, match):
    import yaml
    over = tmp_path / "bad.yaml"
    over.write_text(yaml.safe_dump({"tasks": {"world": {key: value}}}))
    with pytest.raises(ConfigError, match=match):
        load_config([repo / "configs/tiny.yaml", over])
    with pytest.raises(ConfigError, match=match):
        worked.settings({"world": {key: value}})


@pytest.mark.e2e  # ~10 s
def test_world_report_splits_greedy_wrong_by_slip_templates_and_draws(repo, tmp_path):
    """End to end on a 3-step policy: the report's new fields, then its figure from the JSON alone."""
    from sparserl.cli.figures import draw_figure
    from sparserl.core.artifacts import write_table
    from sparserl.core.paths import Paths
    from sparserl.evaluation.world import world_report
    from sparserl.figures import list_figures
    from sparserl.models.policies import pretrain, pretrain_files
    from sparserl.models.tokenizer import train_tokenizer
    cfg = _cfg(repo)
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["tasks"]["train_pool"]["size"] = 24
    cfg["tasks"]["benchmarks"] = cfg["tasks"]["benchmarks"][:3]
    for b in cfg["tasks"]["benchmarks"]:
        b["size"] = 12
    cfg["policies"] = {"s": {**cfg["policies"]["s"], "steps": 3}}
    cfg["pretrain"].update(snapshots=[], compile=False)  # 3 steps: compiling would be most of the test
    cfg["world"] = {"samples": 2}
    cfg["rollout"]["max_new_tokens"] = 8
    P = Paths(cfg)
    corpus = procedural.make_pretrain_corpus(cfg)
    write_table(corpus, P.pretrain_corpus())
    write_table(procedural.make_train_pool(cfg), P.train_pool())
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, P.benchmark(name))
    train_tokenizer([format_prompt(cfg, p) + t for p, t in zip(corpus["problem"], corpus_targets(cfg, corpus))],
                    cfg["tokenizer"]["vocab_size"], P.tokenizer(), cfg["tokenizer"]["max_length"])
    pretrain(cfg, "s", **pretrain_files(Paths(cfg), "s"))
    report = world_report(cfg, {"s": P.policy("s")}, pool=P.train_pool(), corpus=P.pretrain_corpus(),
                          tokenizer=P.tokenizer(), benchmarks=[P.benchmark(b) for b in P.benchmark_names()],
                          out=P.world_report())
    gw = report["policies"]["s"]["greedy_wrong"]
    assert gw["problems"] == 36 and 0 <= gw["heldout"] <= 1
    assert gw["slip_problems"] == sum(
        worked.is_slip_template(worked.template(p), 0.3, 1) for b in cfg["tasks"]["benchmarks"]
        for p in pd.read_parquet(P.benchmark(b["name"]))["problem"])
    tokens = report["corpus_answer_tokens"]
    assert set(tokens) == set(corpus["source"]) | {"all"} and tokens["all"]["min"] >= 10
    sets = report["policies"]["s"]["sets"]
    assert all("greedy_wrong" in r and r["eval_protocol"] == r["sampled_t1_k2"] for n, r in sets.items()
               if n != "rl_pool")
    assert "world/start_policy" in [f.id for f in list_figures(cfg)]
    png = draw_figure("world/start_policy", cfg, Paths(cfg), out=tmp_path / "fig" / "start_policy.png")
    assert png.exists() and png.with_suffix(".csv").exists()
    assert "world/start_policy" in [f.id for f in list_figures(load_config(repo / "configs/tiny.yaml"))]
    world1 = load_config([repo / "configs/tiny.yaml", repo / "configs/overlays/world1.yaml"])
    assert "world/start_policy" not in [f.id for f in list_figures(world1)]
