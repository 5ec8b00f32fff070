"""V0's harvest run (engines/harvest.py): the OpenRLHF engine's goes through the launcher with the
harvest's own config and its run record, as `openrlhf-launch` does."""
import inspect
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_an_openrlhf_harvest_launches_its_run_with_the_launchers_signature(tmp_path, monkeypatch):
    from sparserl.core.config import load_config
    from sparserl.engines import harvest
    from sparserl.engines.harvest_settings import harvest_config
    from sparserl.engines.openrlhf import launcher
    cfg = load_config([str(REPO / "configs/openrlhf_cpu.yaml"), str(REPO / "configs/overlays/openrlhf_cpu_v0.yaml")])
    cfg["results_dir"] = "results"
    real, calls = launcher.run, []

    def fake(*args, **kw):
        inspect.signature(real).bind(*args, **kw)  # a call the real launcher would refuse fails here
        calls.append((args, kw))
        return []
    monkeypatch.setattr(launcher, "run", fake)
    monkeypatch.chdir(tmp_path)
    rp = harvest.run_harvest(cfg, "p", run_dir=Path("results/values/harvest/runs/p"))
    [(args, kw)] = calls
    hcfg, rec = args
    assert hcfg == harvest_config(cfg, "p") and rec.method == cfg["v0"]["harvest"]["method"]
    # Ray's workers do not share the driver's cwd: the run's folder is absolute
    assert rec.paths.dir == tmp_path / "results/values/harvest/runs/p" and rec.paths.dir.is_absolute()
    assert rp.dir == rec.paths.dir
    [cfg_file] = kw["config_paths"]
    assert json.loads(Path(cfg_file).read_text()) == json.loads(json.dumps(hcfg))
