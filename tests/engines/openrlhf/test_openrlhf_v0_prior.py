"""The V0 prior actor of the OpenRLHF engine (engines.openrlhf.v0_server): every query must leave
a line in the run's log, and the actor runs with the threads it was given. Its placement in
OpenRLHF's colocated group is tested in test_placement.
"""
from __future__ import annotations

import numpy as np
import pytest

from sparserl.engines.openrlhf import v0_server

from helpers.v0_toys import toy_v0


def test_each_v0_query_is_logged_with_its_context_and_p(tmp_path, capsys):
    model, emb = toy_v0(tmp_path)
    server = v0_server.V0PriorServer(model, embeddings=emb)
    assert "[v0-prior] serving V0Prior(toy, head gp) on cpu" in capsys.readouterr().err
    assert server.predict(["a", "c"], []) == [0.5, 0.5]
    p = server.predict(["c", "b"], [["a", 1.0], ["b", 0.0], ["a", 1.0]])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "[v0-prior] call 1: 2 prompts, empty context (0.5 for all), p min/mean/max 0.500/0.500/0.500"
    assert err[1].startswith("[v0-prior] call 2: 2 prompts, context 3 (mean reward 0.667), p min/mean/max ")
    lo, mean, hi = (float(x) for x in err[1].rsplit(" ", 1)[1].split("/"))
    assert lo == pytest.approx(min(p), abs=5e-4) and hi == pytest.approx(max(p), abs=5e-4)
    assert mean == pytest.approx(np.mean(p), abs=5e-4)
    assert server.stats() == {"calls": 2, "device": "cpu"}


def test_the_actor_sets_its_threads(tmp_path, capsys):
    import torch
    model, emb = toy_v0(tmp_path)
    before = torch.get_num_threads()
    try:
        v0_server.V0PriorServer(model, embeddings=emb, threads=2)
        assert torch.get_num_threads() == 2 and "2 threads)" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
