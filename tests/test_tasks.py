import pandas as pd

from sparserl.core.config import load_config
from sparserl.tasks import format_prompt, format_target, procedural


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
