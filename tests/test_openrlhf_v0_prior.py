"""The V0 prior actor of the OpenRLHF engine on a machine without CUDA (engines.openrlhf.v0_server).

Under the CPU profile Ray's GPUs are logical, one per bundle of OpenRLHF's placement groups, so a
V0 actor asking for a GPU would wait forever; and every query must leave a line in the run's log.
No Ray cluster is started: `ray.remote` is replaced by a recorder of the actor's options.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sparserl.engines.openrlhf import cpu_shims, v0_server

from v0_toys import toy_v0  # tests/v0_toys.py


class _Recorder:
    """ray.remote(cls).options(**kw).remote(*args): records kw and args."""

    def __init__(self):
        self.options_kw, self.args = None, None

    def __call__(self, cls):
        rec = self

        class _Actor:
            def options(self, **kw):
                rec.options_kw = kw
                return SimpleNamespace(remote=lambda *a: rec.args.extend(a) or "handle")
        rec.args = []
        return _Actor()


@pytest.mark.parametrize("flag, asked, want", [("1", 1.0, 0.0), ("1", 0.0, 0.0), (None, 0.25, 0.25), ("0", 1.0, 1.0)])
def test_the_v0_actor_asks_for_no_gpu_under_the_cpu_profile(monkeypatch, capsys, flag, asked, want):
    import ray
    if flag is None:
        monkeypatch.delenv(cpu_shims.ENV_FLAG, raising=False)
    else:
        monkeypatch.setenv(cpu_shims.ENV_FLAG, flag)
    rec = _Recorder()
    monkeypatch.setattr(ray, "remote", rec)
    assert v0_server.v0_server("/m/v0.pt", ["/c.json"], gpus=asked) == "handle"
    assert rec.options_kw["num_gpus"] == want and rec.options_kw["num_cpus"] == 1
    assert rec.options_kw["name"] == v0_server.ACTOR_NAME and rec.options_kw["get_if_exists"] is True
    assert rec.args == ["/m/v0.pt", ["/c.json"], None]
    err = capsys.readouterr().err
    assert ("asks Ray for 0 GPUs, not 1" in err) == (flag == "1" and asked > 0)


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
