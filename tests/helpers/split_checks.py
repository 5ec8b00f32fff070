"""The split guarantees (the RL pool never in pre-training, no benchmark problem in either),
checked the same way for every world."""
import pandas as pd

from sparserl.tasks import procedural


def assert_split_guarantees(cfg: dict) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """No pool problem in the pre-training corpus, no benchmark problem in either, the pool and
    the benchmarks each from their side of the hash split. Returns (pool, benchmarks)."""
    pool = procedural.make_train_pool(cfg)
    corpus = procedural.make_pretrain_corpus(cfg)
    benches = procedural.make_benchmarks(cfg)
    held = set(pd.concat(benches.values())["problem"])
    assert not set(pool["problem"]) & set(corpus["problem"])
    assert not held & set(pool["problem"]) and not held & set(corpus["problem"])
    split = procedural.task_split(cfg["tasks"])
    assert {procedural.split_of(p, split) for p in pool["problem"]} == {"rl"}
    assert {procedural.split_of(p, split) for p in held} == {"eval"}
    return pool, benches
