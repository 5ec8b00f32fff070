"""Tiny policy pre-training: resume after a kill, snapshots restored, same weights."""
import shutil

import pytest
import torch

from sparserl.core.artifacts import read_manifest, write_table
from sparserl.core.config import load_config
from sparserl.core.paths import Paths
from sparserl.models.policies import pretrain, pretrain_files
from sparserl.tasks import format_prompt, format_target, procedural
from sparserl.models.tokenizer import train_tokenizer


def _world(repo, root):
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(root)
    cfg["policies"] = {"s": cfg["policies"]["s"]}
    cfg["pretrain"]["checkpoint_every"] = 5  # 20 steps, snapshot at 10
    P = Paths(cfg)
    corpus = procedural.make_pretrain_corpus(cfg)
    write_table(corpus, P.pretrain_corpus())
    texts = [format_prompt(cfg, p) + format_target(cfg, a) for p, a in zip(corpus["problem"], corpus["answer"])]
    train_tokenizer(texts, 268, P.tokenizer(), 24)
    return cfg, P


def _weights(path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(str(path)).state_dict()


def test_pretrain_resumes_after_a_kill_with_its_snapshots(repo, tmp_path):
    full, Pf = _world(repo, tmp_path / "full")
    pretrain(full, "s", **pretrain_files(Paths(full), "s"))
    killed, Pk = _world(repo, tmp_path / "killed")
    with pytest.raises(RuntimeError, match="simulated kill"):
        pretrain(killed, "s", stop_after=17, **pretrain_files(Paths(killed), "s"))  # checkpoint at 15: steps 16-17 are replayed
    assert (Pk.pretrain_state("s") / "last.pt").exists()
    shutil.rmtree(Pk.policy("s@p50"))  # Snakemake deletes a failed job's outputs
    pretrain(killed, "s", **pretrain_files(Paths(killed), "s"))
    for ref in ("s", "s@p50"):
        a, b = _weights(Pf.policy(ref)), _weights(Pk.policy(ref))
        assert all(torch.equal(a[k], b[k]) for k in a), ref
    assert not Pk.pretrain_state("s").exists(), "a finished run keeps no resume state"
    # the machine that pre-trained each policy is recorded beside it, outside the checkpoint
    for ref in ("s", "s@p50"):
        man = read_manifest(Pf.policy(ref))
        assert man["machine"]["torch"]["cpu_capability"] and man["step"] == (20 if ref == "s" else 10)
        assert not any(p.name.endswith(".manifest.json") for p in Pf.policy(ref).iterdir())


def test_length_chunks_give_the_one_pass_loss_and_gradient():
    """pretrain.length_chunks cuts a batch into length-sorted chunks to skip padding; the loss and
    the gradient are the one-pass ones (to float rounding), and one chunk is the old code's bits."""
    import copy
    from transformers import LlamaConfig, LlamaForCausalLM
    from sparserl.models.policies import batch_loss
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=64, max_position_embeddings=128))
    x = torch.randint(1, 50, (16, 40))
    m = torch.zeros(16, 40, dtype=torch.bool)
    for i, n in enumerate(torch.randint(10, 40, (16,)).tolist()):
        m[i, 5:n] = True
        x[i, n:] = 0
    ref, one, four = model, copy.deepcopy(model), copy.deepcopy(model)
    L = int(m.nonzero()[:, 1].max()) + 1  # the one-pass loss as pre-training computed it before chunks
    logits = ref(input_ids=x[:, :L]).logits[:, :-1]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), x[:, 1:L].masked_fill(~m[:, 1:L], -100).reshape(-1),
                                             ignore_index=-100)
    loss.backward()
    assert torch.equal(batch_loss(one, x, m, 1), loss.detach())
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ref.parameters(), one.parameters()))
    assert batch_loss(four, x, m, 4).item() == pytest.approx(loss.item(), rel=1e-6)
    for a, b in zip(ref.parameters(), four.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6)
    assert any(not torch.equal(a.grad, b.grad) for a, b in zip(ref.parameters(), four.parameters()))  # 4 passes ran


@pytest.mark.e2e  # torch.compile, ~20 s
def test_bf16_and_compiled_pretraining_starts_from_transformers_init_and_saves_a_loadable_policy(
        repo, tmp_path, monkeypatch):
    """policies.<name>.precision: bf16 and pretrain.compile train our Qwen3 from transformers'
    initialisation (the same draw as the float32 path), with bf16 matmuls and compiled layers, and
    save a checkpoint transformers reads; the loss stays near the float32 run's."""
    from sparserl.core import machine
    from sparserl.models import policies
    from sparserl.models.qwen3 import Qwen3LM
    monkeypatch.setattr(machine, "native_bf16", lambda: True)  # as on an AVX-512 BF16 CPU
    seen = {}
    real_loss = policies.batch_loss

    def spy(model, x, m, chunks=1):
        seen.setdefault("model", model)
        return real_loss(model, x, m, chunks)
    monkeypatch.setattr(policies, "batch_loss", spy)
    fp32, P32 = _world(repo, tmp_path / "fp32")
    pretrain(fp32, "s", **pretrain_files(Paths(fp32), "s"))
    assert not isinstance(seen.pop("model"), Qwen3LM)  # the default path keeps transformers
    fast, Pf = _world(repo, tmp_path / "fast")
    fast["policies"]["s"]["precision"] = "bf16"
    fast["pretrain"]["compile"] = True
    init = {}
    real_from = Qwen3LM.from_module.__func__

    def from_module(cls, model):
        init.update({k: v.clone() for k, v in model.state_dict().items()})
        return real_from(cls, model)
    monkeypatch.setattr(Qwen3LM, "from_module", classmethod(from_module))
    pretrain(fast, "s", **pretrain_files(Paths(fast), "s"))
    model = seen["model"]
    assert isinstance(model, Qwen3LM) and model.matmul_dtype is torch.bfloat16
    assert all(getattr(layer.forward, "_torchdynamo_orig_callable", None) for layer in model.model.layers)
    # the same initial weights as the float32 run's transformers model (one seeded draw)
    torch.manual_seed(fast["seed"] * 100 + sum(map(ord, "s")))
    from transformers import AutoTokenizer
    ref = policies.build_model(fast["policies"]["s"], AutoTokenizer.from_pretrained(str(Pf.tokenizer())),
                               fast["tokenizer"]["max_length"]).state_dict()
    assert all(torch.equal(init[k], ref[k]) for k in ref)
    a, b = _weights(P32.policy("s")), _weights(Pf.policy("s"))
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)  # bf16 arithmetic trained it
    import json
    l32 = json.loads((P32.policy("s") / "sparserl.json").read_text())["loss_last50"]
    lbf = json.loads((Pf.policy("s") / "sparserl.json").read_text())["loss_last50"]
    assert lbf == pytest.approx(l32, rel=0.1)
    assert (Pf.policy("s") / "generation_config.json").is_file()


def test_start_seed_0_keeps_the_seed_and_another_start_moves_the_weights(repo, tmp_path):
    """pretrain.start_seed 0 keeps the seed formula (seed * 100 + the name's code points), so a
    tree that does not set it keeps its bytes; start 1 pre-trains other weights from the same
    corpus."""
    from sparserl.models.policies import pretrain_seed
    cfg, P0 = _world(repo, tmp_path / "start0")
    assert pretrain_seed(cfg, "s") == cfg["seed"] * 100 + ord("s")
    assert pretrain_seed({**cfg, "seed": 2}, "m") == 200 + ord("m")
    assert pretrain_seed({**cfg, "pretrain": {**cfg["pretrain"], "start_seed": 0}}, "s") == pretrain_seed(cfg, "s")
    other, P1 = _world(repo, tmp_path / "start1")
    other["pretrain"]["start_seed"] = 1
    assert pretrain_seed(other, "s") != pretrain_seed(cfg, "s")
    pretrain(cfg, "s", **pretrain_files(Paths(cfg), "s"))
    pretrain(other, "s", **pretrain_files(Paths(other), "s"))
    a, b = _weights(P0.policy("s")), _weights(P1.policy("s"))
    assert a.keys() == b.keys() and not any(torch.equal(a[k], b[k]) for k in a if a[k].numel() > 1 and a[k].std() > 0)
    assert read_manifest(P1.policy("s"))["start"] == 1 and read_manifest(P0.policy("s"))["start"] == 0


@pytest.mark.parametrize("folder", ["snaps", "m@p50", "s@"])
def test_a_snapshot_folder_not_named_after_its_policy_is_refused_in_one_line(repo, tmp_path, folder):
    """`sparserl pretrain --snapshots` took the tag after '@' unchecked: an IndexError, or a
    snapshot of s saved under m's name."""
    cfg = load_config(repo / "configs/smoke.yaml")
    with pytest.raises(ValueError, match=rf"snapshot folder .*{folder} is not named s@<tag> .*--snapshots"):
        pretrain(cfg, "s", corpus=tmp_path / "c.parquet", tokenizer=tmp_path / "tok", out=tmp_path / "s",
                 snapshots=[tmp_path / folder])
    assert not (tmp_path / "s").exists()
