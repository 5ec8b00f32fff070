import pytest
import pandas as pd

from sparserl.core.config import load_config
from sparserl.tasks import format_prompt, format_target, procedural
from helpers.split_checks import assert_split_guarantees


def test_procedural_split_is_disjoint_and_deterministic(repo):
    cfg = load_config(repo / "configs/smoke.yaml")
    pool = procedural.make_train_pool(cfg)
    corpus = procedural.make_pretrain_corpus(cfg)
    benches = procedural.make_benchmarks(cfg)
    assert len(pool) == cfg["tasks"]["train_pool"]["size"]
    assert pool["problem"].is_unique and pool["id"].is_unique
    held = set(pd.concat(benches.values())["problem"])
    assert not held & set(pool["problem"]), "benchmark problems leaked into the training pool"
    assert not held & set(corpus["problem"]), "benchmark problems leaked into the corpus"
    assert len(corpus) == cfg["tasks"]["pretrain_corpus_size"]
    assert procedural.make_train_pool(cfg).equals(pool)
    for df in benches.values():
        assert list(df.columns[:4]) == ["id", "problem", "answer", "source"]


def test_answers_are_correct_integers(repo):
    cfg = load_config(repo / "configs/tiny.yaml")
    pool = procedural.make_train_pool(cfg)
    for prob, ans in zip(pool["problem"][:200], pool["answer"][:200]):
        assert eval(prob) == int(ans)  # the expressions are plain + - * on integers


def test_prompt_and_target_format(repo):
    cfg = load_config(repo / "configs/tiny.yaml")
    assert format_prompt(cfg, "3 + 4") == "Q: 3 + 4 =\nA:"
    assert format_target(cfg, "7") == " \\boxed{7}"


def _three_way(cfg, rate=0.4):
    cfg = {**cfg, "tasks": {**cfg["tasks"], "split": {"eval": 0.25, "rl": 0.25},
                            "pretrain_noise": {"rate": rate, "kind": "off_by_one"}}}
    cfg["tasks"].pop("heldout_fraction", None)
    return cfg


def test_three_way_split_keeps_the_pool_out_of_pretraining(repo):
    """The RL pool is never seen in pre-training, as DAPO-Math-17k is not SFT data."""
    assert_split_guarantees(_three_way(load_config(repo / "configs/smoke.yaml")))
    # the two-way split of the first world: the pool shares the corpus' side
    two = load_config(repo / "configs/smoke.yaml")
    assert {procedural.split_of(p, procedural.task_split(two["tasks"]))
            for p in procedural.make_train_pool(two)["problem"]} == {"pretrain"}


def test_noisy_targets_are_off_by_one_at_the_rate(repo):
    cfg = _three_way(load_config(repo / "configs/smoke.yaml"), rate=0.4)
    corpus = procedural.make_pretrain_corpus(cfg)
    noisy = corpus["noisy"]
    assert abs(noisy.mean() - 0.4) < 0.05
    diff = corpus["answer"].astype(int) - corpus["clean_answer"].astype(int)
    assert set(diff[noisy]) == {-1, 1} and (diff[~noisy] == 0).all()
    for prob, ans in zip(corpus["problem"][:100], corpus["clean_answer"][:100]):
        assert eval(prob) == int(ans)
    assert procedural.make_pretrain_corpus(cfg).equals(corpus)  # same seed, same corpus
    clean = procedural.make_pretrain_corpus(_three_way(load_config(repo / "configs/smoke.yaml"), rate=0.0))
    assert not clean["noisy"].any() and clean["problem"].equals(corpus["problem"])


def test_in_distribution_benchmarks_are_the_pool_levels(repo):
    cfg = load_config(repo / "configs/tiny.yaml")
    flags = procedural.in_distribution(cfg)
    levels = {(lv["generator"], str(lv.get("params"))) for lv in cfg["tasks"]["train_pool"]["levels"]}
    for b in cfg["tasks"]["benchmarks"]:
        assert flags[b["name"]] == ((b["generator"], str(b.get("params"))) in levels)
    assert any(flags.values()) and not all(flags.values())


def test_pretrain_extra_levels_are_in_the_corpus_only(repo):
    cfg = _three_way(load_config(repo / "configs/smoke.yaml"), rate=0.0)
    extra = {"name": "add_sub_4x1digit", "generator": "chain_sum",
             "params": {"min_terms": 4, "max_terms": 4, "min_digits": 1, "max_digits": 1}}
    cfg["tasks"]["pretrain_extra"] = [extra]
    corpus = procedural.make_pretrain_corpus(cfg)
    pool = procedural.make_train_pool(cfg)
    assert "add_sub_4x1digit" in set(corpus["source"]) and "add_sub_4x1digit" not in set(pool["source"])
    assert (corpus["source"] == "add_sub_4x1digit").mean() == pytest.approx(
        1 / (len(cfg["tasks"]["train_pool"]["levels"]) + 1), abs=0.01)
