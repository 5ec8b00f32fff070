"""A small V0 and its EmbeddingTable on disk, for the tests of V0 as the OpenRLHF engine's live
prior (test_openrlhf_plugin, test_openrlhf_v0_prior)."""
from __future__ import annotations


def toy_v0(tmp_path):
    """A small trained-shaped V0 and an EmbeddingTable of prompts 'a', 'b', 'c' on disk."""
    import torch
    from sparserl.values.v0.embedder import EmbeddingTable
    from sparserl.values.v0.model import V0, save_v0
    torch.manual_seed(0)
    model = V0(16, {"n_static": 12, "d_attn": 24, "d_residual": 16}, {"kind": "gp"}, "toy")
    states = torch.randn(3, 4, 16)
    states[0, :, :4] += 3
    states[1, :, 4:8] += 3
    states[2, :, :4] += 3
    EmbeddingTable(["a", "b", "c"], states.half(), torch.ones(3, 4, dtype=torch.bool), "toy").save(tmp_path / "emb.pt")
    return str(save_v0(model, tmp_path / "v0.pt")), str(tmp_path / "emb.pt")
