import numpy as np
import pytest
import torch

from sparserl.rollout import RolloutBatch, SamplingParams, rollout
from sparserl.rollout.cpu_engine import CPUEngine, _segments, _top_p_mask
from sparserl.rollout.hf import HFBackend, _top_p_filter

PROMPTS = ["Q: 1 + 2 =\nA:", "Q: 3 + 4 - 5 =\nA:", "Q: 9 =\nA:"]  # lengths differ: left padding


@pytest.fixture(params=["cpu", "hf"])
def backend(tiny_lm, request):
    model, tok = tiny_lm
    cls = CPUEngine if request.param == "cpu" else HFBackend
    return cls(model, tok, batch_size=5)


def test_shapes_and_per_prompt_n(backend):
    params = SamplingParams(max_new_tokens=6)
    b = backend.generate(PROMPTS, [3, 0, 5], params, seed=1)
    assert isinstance(b, RolloutBatch) and len(b) == 8
    assert b.n_per_prompt.tolist() == [3, 0, 5]
    assert b.prompt_index.tolist() == [0, 0, 0, 2, 2, 2, 2, 2]
    for ids, lp, fin in zip(b.response_ids, b.logprobs, b.finish_reason):
        assert len(ids) == len(lp) and 1 <= len(ids) <= 6
        assert (lp <= 0).all()
        assert fin == ("stop" if ids[-1] == backend.eos_id else "length")
    assert len(b.texts) == 8 and len(b.prompt_ids) == 3
    df = b.to_frame(prompt_ids=["a", "b", "c"])
    assert df["prompt_id"].tolist() == ["a"] * 3 + ["c"] * 5


def test_seeded_determinism(backend):
    params = SamplingParams(max_new_tokens=6)
    a = backend.generate(PROMPTS, 4, params, seed=7)
    b = backend.generate(PROMPTS, 4, params, seed=7)
    c = backend.generate(PROMPTS, 4, params, seed=8)
    assert a.response_ids == b.response_ids
    assert all(np.array_equal(x, y) for x, y in zip(a.logprobs, b.logprobs))
    assert a.response_ids != c.response_ids


def test_logprobs_match_a_full_forward(backend):
    """The KV-cached, left-padded loop must give the same log-probs as one plain forward."""
    model = backend.model
    b = backend.generate(PROMPTS, 2, SamplingParams(max_new_tokens=6, temperature=0.7), seed=3)
    for m in range(len(b)):
        p = b.prompt_ids[b.prompt_index[m]]
        r = b.response_ids[m]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p + r])).logits[0, len(p) - 1:-1] / 0.7
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
        np.testing.assert_allclose(b.logprobs[m], ref.numpy(), atol=1e-5)


def test_greedy_is_argmax_and_seed_free(backend):
    g = SamplingParams(max_new_tokens=5, greedy=True)
    a = backend.generate(PROMPTS, 2, g, seed=1)
    b = backend.generate(PROMPTS, 1, g, seed=99)
    assert a.response_ids[0] == a.response_ids[1] == b.response_ids[0]


def test_top_p_filter_keeps_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(_top_p_filter(logits, 0.7))[0].tolist()
    assert kept == [True, True, False, False]
    assert torch.isfinite(_top_p_filter(logits, 0.4))[0].tolist() == [True, False, False, False]
    assert torch.equal(_top_p_filter(logits, 1.0), logits)


def test_bad_params_rejected():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=1.5)


def test_n_shape_mismatch(backend):
    with pytest.raises(ValueError, match="3 prompts"):
        backend.generate(PROMPTS, [1, 2], SamplingParams(), seed=0)


def test_rollout_scores_rewards(backend):
    class Exact:
        def score(self, texts, gold):
            return [float(t.strip() == g) for t, g in zip(texts, gold)]

    b = backend.generate(PROMPTS, 2, SamplingParams(max_new_tokens=4), seed=5)
    scored = rollout(backend, PROMPTS, [b.texts[0].strip(), "x", "y"], 2,
                     SamplingParams(max_new_tokens=4), 5, Exact())
    assert scored.rewards.dtype == np.float32 and scored.rewards.shape == (6,)
    assert scored.rewards[0] == 1.0 and scored.rewards[2:].sum() == 0


# ------------------------------------------------------------------ the CPU engine's own levers


def _frequent_eos(engine, prompts, n, params, seed):
    """Make a token that some rows of this very call sample the EOS, so rows finish at different
    steps and the engine's drop-finished path runs."""
    b = engine.generate(prompts, n, params, seed=seed)
    counts = np.bincount(np.concatenate(b.response_ids))
    has = np.array([[t in r for r in b.response_ids] for t in range(len(counts))])
    some = np.flatnonzero((has.sum(1) > 0) & (has.sum(1) < len(b)))
    engine.eos_id = int(some[np.argmax(counts[some])])
    return engine


@pytest.mark.parametrize("top_p,greedy", [(1.0, False), (0.7, False), (1.0, True)])
def test_cpu_engine_levers_change_no_sample(tiny_lm, top_p, greedy):
    """De-duplicated prefill and dropping finished rows change the arithmetic, not the draws: the
    noise of every row is drawn at every step, whichever rows are still running."""
    model, tok = tiny_lm
    prompts = [f"Q: {i} + {i % 3} {'- 1 ' * (i % 3)}=\nA:" for i in range(7)]
    n = [3, 0, 2, 5, 1, 4, 2]
    params = SamplingParams(max_new_tokens=8, top_p=top_p, greedy=greedy, temperature=0.9)
    runs = {}
    for kw in [{}, {"dedup": False}, {"drop_finished": False}, {"compact_at": 0.01}]:
        eng = CPUEngine(model, tok, batch_size=64, **kw)
        if not greedy:  # the random model's greedy path repeats one token: nothing to stop on
            _frequent_eos(eng, prompts, n, params, 4)
        runs[str(kw)] = eng.generate(prompts, n, params, seed=4)
    base = runs["{}"]
    if not greedy:
        assert len(set(base.finish_reason)) == 2, "the test needs rows that stop and rows that run on"
    for kw, b in runs.items():
        assert b.response_ids == base.response_ids, kw
        for x, y in zip(b.logprobs, base.logprobs):
            np.testing.assert_allclose(x, y, atol=1e-5)


def test_cpu_engine_logprobs_with_rows_dropping_out(tiny_lm):
    model, tok = tiny_lm
    prompts = [f"Q: {i} + 2 =\nA:" for i in range(5)] + ["Q: 1 + 2 + 3 + 4 =\nA:"]
    params = SamplingParams(max_new_tokens=8)
    eng = _frequent_eos(CPUEngine(model, tok, batch_size=16, compact_at=0.01), prompts, 4, params, 2)
    b = eng.generate(prompts, 4, params, seed=2)
    assert "stop" in b.finish_reason and "length" in b.finish_reason
    for m in range(len(b)):
        p, r = b.prompt_ids[b.prompt_index[m]], b.response_ids[m]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p + r])).logits[0, len(p) - 1:-1]
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
        np.testing.assert_allclose(b.logprobs[m], ref.numpy(), atol=1e-5)
        assert (r[-1] == eng.eos_id) == (b.finish_reason[m] == "stop")
        assert eng.eos_id not in r[:-1]


def test_cpu_engine_samples_the_tempered_distribution(tiny_lm):
    """Gumbel-max draws follow softmax(logits / T): first-token frequencies over many rows match
    the model's probabilities (a chi-square bound far from the 1e-3 tail)."""
    model, tok = tiny_lm
    eng = CPUEngine(model, tok, batch_size=4096)
    prompt, T = "Q: 3 + 4 =\nA:", 1.3
    b = eng.generate([prompt], 8000, SamplingParams(max_new_tokens=1, temperature=T), seed=11)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([b.prompt_ids[0]])).logits[0, -1] / T
    p = torch.softmax(logits, -1).numpy()
    counts = np.bincount([r[0] for r in b.response_ids], minlength=len(p))
    top = p > 5 / 8000  # cells with enough expected counts
    expected = 8000 * p[top]
    chi2 = float((((counts[top] - expected) ** 2) / expected).sum())
    assert chi2 < top.sum() + 6 * np.sqrt(2 * top.sum()), chi2


def test_cpu_engine_reads_the_live_weights(tiny_lm):
    """The local trainer rolls out the model it trains: a weight change must show in the next call."""
    model, tok = tiny_lm
    import copy
    m2 = copy.deepcopy(model)
    eng = CPUEngine(m2, tok)
    params = SamplingParams(max_new_tokens=4, greedy=True)
    before = eng.generate(PROMPTS, 1, params, seed=0)
    with torch.no_grad():
        m2.lm_head.weight.mul_(-1.0)  # tied to the embeddings: a very different model
    after = eng.generate(PROMPTS, 1, params, seed=0)
    assert not all(np.allclose(a, b) for a, b in zip(before.logprobs, after.logprobs))


def test_cpu_engine_segments_cover_every_row_once():
    chunks = _segments([5, 3, 9, 3], np.array([4, 0, 7, 2]), batch_size=3)
    assert all(sum(c for _, c in ch) <= 3 for ch in chunks)
    per_prompt = np.zeros(4, int)
    for ch in chunks:
        for p, c in ch:
            per_prompt[p] += c
    assert per_prompt.tolist() == [4, 0, 7, 2]
    assert [p for ch in chunks for p, _ in ch][0] == 3  # shortest prompt first


def test_cpu_engine_top_p_mask_matches_the_hf_filter():
    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(0))
    logp = torch.log_softmax(logits, -1)
    for top_p in (0.3, 0.7, 0.95):
        assert torch.equal(torch.isfinite(_top_p_mask(logp, top_p)),
                           torch.isfinite(_top_p_filter(logits, top_p)))


def test_cpu_engine_rejects_what_it_does_not_implement(tiny_lm):
    model, tok = tiny_lm
    import copy
    m2 = copy.deepcopy(model)
    m2.config.hidden_act = "gelu"
    with pytest.raises(ValueError, match="silu"):
        CPUEngine(m2, tok)
    with pytest.raises(ValueError, match="batch_size"):
        CPUEngine(model, tok, batch_size=0)


# ------------------------------------------------------- a checkpoint dir, without transformers


@pytest.fixture()
def saved_lm(tiny_lm, tmp_path):
    from sparserl.models.policies import save_hf
    model, tok = tiny_lm
    save_hf(model, tok, tmp_path / "ckpt", {"policy": "test"})
    return tmp_path / "ckpt"


def test_cpu_engine_from_files_equals_the_live_model(tiny_lm, saved_lm):
    """Weights read from the checkpoint's files (no transformers) give the bytes the live module gives."""
    model, tok = tiny_lm
    params = SamplingParams(max_new_tokens=6, temperature=0.8, top_p=0.9)
    live = CPUEngine(model, tok, batch_size=7).generate(PROMPTS, [3, 0, 5], params, seed=9)
    files = CPUEngine(saved_lm, batch_size=7).generate(PROMPTS, [3, 0, 5], params, seed=9)
    assert files.response_ids == live.response_ids and files.texts == live.texts
    assert files.prompt_ids == live.prompt_ids
    assert all(np.array_equal(a, b) for a, b in zip(files.logprobs, live.logprobs))


def test_file_tokenizer_equals_transformers(saved_lm):
    from transformers import AutoTokenizer
    from sparserl.rollout.cpu_engine import _FileTokenizer, load_tokenizer
    ours, theirs = load_tokenizer(saved_lm), AutoTokenizer.from_pretrained(str(saved_lm))
    assert isinstance(ours, _FileTokenizer)
    assert (ours.eos_token_id, ours.pad_token_id) == (theirs.eos_token_id, theirs.pad_token_id)
    for p in PROMPTS + ["Q: 12 * 3 - 4 =\nA: \\boxed{32}", ""]:
        assert ours(p, add_special_tokens=False)["input_ids"] == theirs(p, add_special_tokens=False)["input_ids"]
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, len(theirs), rng.integers(0, 12)).tolist() for _ in range(200)]
    assert ours.batch_decode(seqs, skip_special_tokens=True) == theirs.batch_decode(seqs, skip_special_tokens=True)


def test_rope_frequencies_equal_transformers(tiny_lm):
    from sparserl.rollout.cpu_engine import _Decoder
    model, _ = tiny_lm
    assert torch.equal(_Decoder.from_module(model).inv_freq, model.model.rotary_emb.inv_freq.float())


def test_rollout_jobs_import_no_transformers(saved_lm):
    """A rollout-only job (evaluation, pass rates, caches) pays for torch alone: importing
    transformers costs ~3.5 s a job, more than the rollouts of a tiny evaluation."""
    import subprocess
    import sys
    code = ("import sys\nfrom sparserl.rollout import SamplingParams, make_backend\n"
            f"b = make_backend({{'rollout': {{'backend': 'cpu'}}}}, {str(saved_lm)!r})\n"
            "out = b.generate(['Q: 1 + 2 =\\nA:'], 3, SamplingParams(max_new_tokens=4), 0)\n"
            "assert len(out) == 3\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_cpu_engine_names_a_dir_that_is_no_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"not a safetensors checkpoint"):
        CPUEngine(tmp_path)


def test_top_p_mask_partial_sort_equals_the_full_sort():
    """The top-k fast path and the rows that fall back to the full sort give the full sort's nucleus."""
    from sparserl.rollout.cpu_engine import _nucleus
    g = torch.Generator().manual_seed(3)
    logits = torch.cat([torch.randn(50, 300, generator=g) * 4,      # peaked: nucleus inside the top k
                        torch.randn(50, 300, generator=g) * 0.01])  # flat: the full sort
    logp = torch.log_softmax(logits, -1)
    for top_p in (0.3, 0.7, 0.95, 1.0 - 1e-9):
        want = _nucleus(logp, *torch.sort(logp, descending=True, dim=-1), top_p)
        for k in (1, 4, 32, 300, 400):
            assert torch.equal(_top_p_mask(logp, top_p, k=k), want), (top_p, k)
