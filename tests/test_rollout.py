import numpy as np
import pytest
import torch

from sparserl.rollout import RolloutBatch, SamplingParams, rollout
from sparserl.rollout.hf import HFBackend, _top_p_filter

PROMPTS = ["Q: 1 + 2 =\nA:", "Q: 3 + 4 - 5 =\nA:", "Q: 9 =\nA:"]  # lengths differ: left padding


@pytest.fixture()
def backend(tiny_lm):
    model, tok = tiny_lm
    return HFBackend(model, tok, batch_size=5)


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
        np.testing.assert_allclose(b.logprobs[m], ref.numpy(), atol=1e-4)


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
