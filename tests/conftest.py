import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def umask022():
    """The usual umask, so a test can check the 0644/0755 modes whatever the runner's umask."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """A random 2-layer Qwen3 policy and a BPE tokenizer trained on a few arithmetic prompts."""
    import torch
    from sparserl.models.policies import build_model
    from sparserl.models.tokenizer import train_tokenizer

    texts = [f"Q: {a} + {b} =\nA: \\boxed{{{a + b}}}" for a in range(10) for b in range(10)]
    tok = train_tokenizer(texts * 3, 120, tmp_path_factory.mktemp("tok") / "tokenizer", 24)
    torch.manual_seed(0)
    pol = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "ffn_size": 64}
    model = build_model(pol, tok, 24)
    model.eval()
    return model, tok
