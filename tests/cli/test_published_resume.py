"""`sparserl published resume`: a wiped sweep worktree continues from the tables published at its
pinned commit. A toy tree (its own Snakefile, in git) stands for the sweep: `weights` (never
published) feeds a published `table`, and both feed `other`, not yet made (an RL run that needs the
start policy and the learning-rate table); `claims` is the rebuild rule. `tasks` makes an
unpublished pool and published benchmarks together, as make_tasks does."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers.head_to_head_tables import make_cfg

from sparserl.core import published as pub
from sparserl.core.artifacts import write_table

SNAKEFILE = '''
R = "results/" + config["scale"]
rule all:
    input: R + "/claims.md"
rule claims:
    input: R + "/table.parquet", R + "/other.txt"
    output: R + "/claims.md"
    shell: "cat {input[1]} > {output}"
rule tasks:
    output: R + "/pool.txt", R + "/bench.parquet"
    shell: "echo tasks >> ran.log; echo p > {output[0]}; echo b > {output[1]}"
rule weights:
    input: R + "/pool.txt"
    output: R + "/weights.bin"
    shell: "echo weights >> ran.log; echo w > {output}"
rule table:
    input: R + "/weights.bin", R + "/bench.parquet"
    output: R + "/table.parquet"
    shell: "echo table >> ran.log; echo remade > {output}"
rule other:
    input: R + "/weights.bin", R + "/table.parquet"
    output: R + "/other.txt"
    shell: "echo other >> ran.log; cat {input[0]} > {output}"
'''


def _git(tree, *args):
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout.strip()


def _setup(repo, tmp_path, cpu_flags=None):
    """The toy tree at a commit, and published/smoke/ holding `table.parquet` made at that commit
    (and one table of another commit)."""
    cfg_path = tmp_path / "smoke.yaml"
    cfg_path.write_text(yaml.safe_dump(make_cfg(repo)))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "Snakefile").write_text(SNAKEFILE)
    _git(tree, "init", "-q")
    _git(tree, "-c", "user.email=t@t", "-c", "user.name=t", "add", "Snakefile")
    _git(tree, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "toy sweep")
    head = _git(tree, "rev-parse", "HEAD")
    root = tmp_path / "published" / "smoke"
    files = {}
    for name, commit in (("table.parquet", head), ("bench.parquet", head), ("old.parquet", "0" * 40)):
        path = root / "results" / name
        write_table(pd.DataFrame({"x": [1.0, 2.0]}), path)
        mp = pub.manifest_path(path)
        m = json.loads(mp.read_text())
        m["git_commit"] = commit
        if cpu_flags is not None:
            m["machine"]["cpu"]["flags"] = cpu_flags
        mp.write_text(json.dumps(m))
        files[f"results/{name}"] = {"group": "toy", "declared": True, "git_commit": commit,
                                    "sha256": pub.sha256(path), "bytes": path.stat().st_size}
    pub.write_index(root, {"scale": "smoke", "configfiles": [str(cfg_path)], "files": files})
    return cfg_path, tree, root


def _resume(cfg_path, tree, root, *extra) -> int:
    from sparserl.cli import main
    return main(["published", "resume", "smoke", "--configfile", str(cfg_path), "--published", str(root.parent),
                 "--tree", str(tree), *extra])


@pytest.mark.e2e  # ~15 s: five Snakemake runs of a toy tree
def test_resume_makes_the_upstream_first_and_never_remakes_a_restored_table(repo, tmp_path, capsys):
    cfg_path, tree, root = _setup(repo, tmp_path)
    assert _resume(cfg_path, tree, root) == 0
    out = capsys.readouterr().out
    R = tree / "results/smoke"
    # the published table is restored, not remade, though its upstream was missing and is made
    assert pub.sha256(R / "table.parquet") == pub.sha256(root / "results/table.parquet")
    # the benchmarks are made again with the pool (their job must run); the table, whose upstream
    # is made first, is not
    assert (tree / "ran.log").read_text().split() == ["tasks", "weights", "other"]
    assert (R / "other.txt").read_text() == "w\n"
    assert not (R / "claims.md").exists()          # the rebuild's job: `published rebuild`
    assert not (R / "old.parquet").exists()        # another commit's table
    assert "2 published tables of" in out and "1 made at other commits not restored" in out
    assert "1 restored tables are made again by jobs whose other outputs are gone" in out
    assert "phase 1: 1 restored tables wait on upstream" in out and "phase 2" not in out
    # a second resume finds nothing left to make and still remakes nothing
    assert _resume(cfg_path, tree, root) == 0
    assert (tree / "ran.log").read_text().split() == ["tasks", "weights", "other"]


@pytest.mark.e2e  # ~3 s
def test_resume_refuses_tables_of_another_machine_and_a_dirty_tree(repo, tmp_path):
    cfg_path, tree, root = _setup(repo, tmp_path, cpu_flags=["sse2", "amx_bf16"])
    with pytest.raises(SystemExit, match="another machine record .*machine.cpu.flags"):
        _resume(cfg_path, tree, root, "--plan")
    assert _resume(cfg_path, tree, root, "--plan", "--other-machine") == 0
    assert not (tree / "ran.log").exists()         # --plan runs nothing
    (tree / "Snakefile").write_text(SNAKEFILE + "\n# edited\n")
    with pytest.raises(SystemExit, match="uncommitted changes"):
        _resume(cfg_path, tree, root)
