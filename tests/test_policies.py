"""Tiny policy pre-training: resume after a kill, snapshots restored, same weights."""
import shutil

import pytest
import torch

from sparserl.core.artifacts import write_table
from sparserl.core.config import load_config
from sparserl.core.paths import Paths
from sparserl.models.policies import pretrain
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
    pretrain(full, "s")
    killed, Pk = _world(repo, tmp_path / "killed")
    with pytest.raises(RuntimeError, match="simulated kill"):
        pretrain(killed, "s", stop_after=17)  # checkpoint at 15: steps 16-17 are replayed
    assert (Pk.pretrain_state("s") / "last.pt").exists()
    shutil.rmtree(Pk.policy("s@p50"))  # Snakemake deletes a failed job's outputs
    pretrain(killed, "s")
    for ref in ("s", "s@p50"):
        a, b = _weights(Pf.policy(ref)), _weights(Pk.policy(ref))
        assert all(torch.equal(a[k], b[k]) for k in a), ref
    assert not Pk.pretrain_state("s").exists(), "a finished run keeps no resume state"
