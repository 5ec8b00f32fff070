"""The CPU trainer's AdamW (no torch.optim import) against torch.optim.AdamW: same bits."""
import pytest
import torch

from sparserl.engines.local.adamw import AdamW


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Embedding(11, 8), torch.nn.Linear(8, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 11))


def _train(model, opt, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, 11, (5, 3), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 11), x.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("wd", [0.0, 0.01])
@pytest.mark.parametrize("lr", [1e-4, 3e-3])
def test_adamw_gives_torch_adamw_bits(lr, wd):
    a, b = _model(), _model()
    _train(a, torch.optim.AdamW(a.parameters(), lr=lr, weight_decay=wd), 7)
    _train(b, AdamW(b.parameters(), lr=lr, weight_decay=wd), 7)
    assert _same(a, b)
    # and it moved: a test that compares two unmoved models would pass by itself
    assert not _same(a, _model())


def test_adamw_state_dict_resumes_across_implementations():
    ref = _model()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3, weight_decay=0.0)
    _train(ref, opt_ref, 3)
    mine = _model()
    mine.load_state_dict(ref.state_dict())
    opt = AdamW(mine.parameters(), lr=1e-3, weight_decay=0.0)
    opt.load_state_dict(opt_ref.state_dict())        # torch's checkpoint into ours
    _train(ref, opt_ref, 4, seed=2)
    _train(mine, opt, 4, seed=2)
    assert _same(ref, mine)
    back = _model()
    back.load_state_dict(mine.state_dict())
    opt_back = torch.optim.AdamW(back.parameters(), lr=1e-3, weight_decay=0.0)
    opt_back.load_state_dict(opt.state_dict())       # and ours into torch's
    _train(mine, opt, 2, seed=3)
    _train(back, opt_back, 2, seed=3)
    assert _same(mine, back)


def test_adamw_rejects_a_checkpoint_of_another_model():
    opt = AdamW(_model().parameters())
    other = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="another model"):
        opt.load_state_dict(other.state_dict())


def test_trainer_does_not_import_torch_dynamo():
    import subprocess, sys
    code = ("import sys, torch; from sparserl.engines.local.adamw import AdamW; "
            "m = torch.nn.Linear(2, 2); o = AdamW(m.parameters()); m(torch.ones(1, 2)).sum().backward(); "
            "o.step(); o.zero_grad(); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
