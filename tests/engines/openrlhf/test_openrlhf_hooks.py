"""The OpenRLHF engine's one post-import hook (sparserl.engines.openrlhf.hooks): `cpu_shims` and
`patches` register callbacks into it; a module in both tables gets the shims, then the patches,
whatever the order of registration and import; one finder on sys.meta_path."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sparserl.engines.openrlhf import hooks

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Empty callback tables and sys.meta_path / sys.path put back afterwards; a writer of
    importable modules under tmp_path whose body appends "exec" to a shared log."""
    monkeypatch.setattr(hooks, "_AFTER", {})
    monkeypatch.setattr(hooks, "_AROUND", {})
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    log: list[str] = []
    monkeypatch.setattr(sys.modules[__name__], "LOG", log, raising=False)
    made = []

    def module() -> str:
        name = f"hooks_probe_{uuid.uuid4().hex[:12]}"
        (tmp_path / f"{name}.py").write_text(f"import {__name__} as t\nt.LOG.append('exec')\nVALUE = 1\n")
        made.append(name)
        return name

    yield module, log
    for name in made:
        sys.modules.pop(name, None)


def _record(log, tag):
    def cb(module):
        log.append(f"{tag}:{module.__name__.rsplit('_', 1)[-1][:4]}")
        module.VALUE = tag  # each sets the same attribute: the last one wins
    return cb


def _around(log, tag):
    def cb(exec_module, module):
        log.append(f"{tag}<")
        exec_module()
        log.append(f">{tag}")
    return cb


@pytest.mark.parametrize("patches_first", [False, True])
def test_both_callbacks_run_in_the_documented_order_on_import(fresh, patches_first):
    """Shims (order 0) before patches (order 10) after the module executes, in either
    registration order; around-exec callbacks wrap the execution itself."""
    module, log = fresh
    name = module()
    short = name.rsplit("_", 1)[-1][:4]
    hooks.install()
    regs = [lambda: hooks.after_import(name, "cpu_shims", _record(log, "shims"), hooks.SHIMS),
            lambda: hooks.after_import(name, "patches", _record(log, "patches"), hooks.PATCHES)]
    for reg in (regs[::-1] if patches_first else regs):
        assert reg() is None  # not imported yet: nothing runs
    hooks.around_exec(name, "cpu_shims", _around(log, "stub"), hooks.SHIMS)
    mod = __import__(name)
    assert log == ["stub<", "exec", ">stub", f"shims:{short}", f"patches:{short}"]
    assert mod.VALUE == "patches"
    assert hooks.registered(name) == [("around", 0, "cpu_shims"), ("after", 0, "cpu_shims"), ("after", 10, "patches")]


def test_registering_after_the_import_ends_in_the_documented_order(fresh):
    """A module imported before its callbacks were registered: each runs at once, and a shim
    registered after a patch re-runs the patch after it (callbacks are idempotent)."""
    module, log = fresh
    name = module()
    mod = __import__(name)
    short = name.rsplit("_", 1)[-1][:4]
    assert hooks.after_import(name, "patches", lambda m: [_record(log, "patches")(m), "done"][1], hooks.PATCHES) == "done"
    hooks.after_import(name, "cpu_shims", _record(log, "shims"), hooks.SHIMS)
    assert log == ["exec", f"patches:{short}", f"shims:{short}", f"patches:{short}"]
    assert mod.VALUE == "patches"
    # the same key again replaces its callback: one shim, not two
    hooks.after_import(name, "cpu_shims", _record(log, "shims2"), hooks.SHIMS)
    assert [k for _p, _o, k in hooks.registered(name)] == ["cpu_shims", "patches"]


def test_one_finder_whatever_installs_it(fresh, monkeypatch):
    """cpu_shims and patches (and the worker hook, both) share one sys.meta_path entry."""
    from types import SimpleNamespace

    from sparserl.engines.openrlhf import cpu_shims, patches
    monkeypatch.setattr(cpu_shims, "cuda_present", lambda: False)
    # modules other tests imported stay as they are: the hooks see none imported
    monkeypatch.setattr(hooks, "sys", SimpleNamespace(modules={}, meta_path=sys.meta_path))
    cpu_shims.install_import_shims()
    patches.install_patches()
    hooks.install()
    cpu_shims.install_import_shims()
    ours = [f for f in sys.meta_path if type(f).__module__.startswith("sparserl.")]
    assert len(ours) == 1 and isinstance(ours[0], hooks.PostImportFinder)
    both = "openrlhf.trainer.ray.ppo_actor"  # in cpu_shims.MODULE_SHIMS and patches.PATCHES
    assert hooks.registered(both) == [("after", hooks.SHIMS, "cpu_shims"), ("after", hooks.PATCHES, "patches")]
    assert hooks.registered("torch") == []  # torch's shims only when asked (cuda=True)
    hooks.unregister("patches")
    assert hooks.registered(both) == [("after", hooks.SHIMS, "cpu_shims")]


def test_unregistered_modules_are_not_touched(fresh):
    module, log = fresh
    name = module()
    finder = hooks.install()
    assert finder.find_spec(name, None) is None  # nothing registered: the other finders import it
    hooks.after_import(name, "patches", _record(log, "patches"), hooks.PATCHES)
    spec = finder.find_spec(name, None)
    assert spec is not None and type(spec.loader).__name__ == "_HookedLoader"


@pytest.mark.e2e  # imports the real OpenRLHF (DeepSpeed, Ray) in a subprocess
@pytest.mark.parametrize("order", ["shims,patches", "patches,shims"])
def test_openrlhf_ppo_actor_gets_the_shim_and_the_patches(order):
    """In a fresh process: OpenRLHF's ppo_actor (in both tables) imported after both installed,
    in either order, has the CPU shim's process group and our PolicyLoss and ActorPPOTrainer."""
    pytest.importorskip("openrlhf")
    steps = {"shims": "cpu_shims.install_import_shims(force=True)", "patches": "patches.install_patches()"}
    code = "\n".join([
        "import sys",
        "from sparserl.engines.openrlhf import cpu_shims, hooks, patches",
        *(steps[s] for s in order.split(",")),
        "import openrlhf.trainer.ray.ppo_actor as pa",
        "from sparserl.engines.openrlhf.losses import SparseRLPolicyLoss",
        "print('SHIM', pa.stateless_init_process_group is cpu_shims.stateless_init_process_group)",
        "print('PATCH', pa.PolicyLoss is SparseRLPolicyLoss, pa.ActorPPOTrainer.__name__)",
        "print('FINDERS', sum(type(f).__module__.startswith('sparserl.') for f in sys.meta_path))",
        "print('ORDER', hooks.registered('openrlhf.trainer.ray.ppo_actor'))",
    ])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout
    assert "SHIM True" in out and "PATCH True SparseRLActorTrainer" in out and "FINDERS 1" in out, \
        out[-2000:] + r.stderr[-3000:]
    assert "ORDER [('after', 0, 'cpu_shims'), ('after', 10, 'patches')]" in out
