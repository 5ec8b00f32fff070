import json
import os

import pandas as pd
import pytest

from sparserl.core.artifacts import (iter_jsonl, read_manifest, read_table, summarize, write_json,
                                write_table)
from sparserl.cli import main


def test_write_table_is_atomic_and_has_manifest(tmp_path):
    df = pd.DataFrame({"prompt_id": ["a", "b"], "n": [64, 64], "successes": [3, 60]})
    p = write_table(df, tmp_path / "x" / "cache.parquet", cfg={"scale": "tiny", "seed": 0})
    assert read_table(p).equals(df)
    man = read_manifest(p)
    assert man["rows"] == 2 and man["scale"] == "tiny" and man["columns"] == list(df.columns)
    assert man["config_hash"] and man["git_commit"] and man["created"]
    # no temporary files left behind
    assert sorted(os.listdir(p.parent)) == ["cache.parquet", "cache.parquet.manifest.json"]


def test_failed_write_keeps_previous_artifact(tmp_path):
    p = write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")

    class Boom(pd.DataFrame):
        def to_parquet(self, *a, **k):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_table(Boom({"a": [2]}), p)
    assert read_table(p)["a"].tolist() == [1]
    assert sorted(os.listdir(tmp_path)) == ["t.parquet", "t.parquet.manifest.json"]


def test_show_prints_summary(tmp_path, capsys):
    p = write_table(pd.DataFrame({"prompt_id": ["a", "b", "c"], "p": [0.1, 0.5, 0.9]}),
                    tmp_path / "t.parquet", cfg={"scale": "tiny"})
    j = write_json({"mean": 0.5}, tmp_path / "m.json")
    assert main(["show", str(p), str(j)]) == 0
    out = capsys.readouterr().out
    assert "3 rows x 2 columns" in out and "mean=0.5" in out and "scale=tiny" in out
    assert '"mean": 0.5' in out


def test_iter_jsonl_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"a": 1}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(iter_jsonl(p))


def test_atomic_torch_save_is_byte_deterministic(tmp_path):
    """Two identical saves give the same bytes (torch names the archive after the file it writes,
    and atomic_file's temp name is random): the tiny DAG's .pt artifacts agree across runs."""
    import torch
    from sparserl.core.artifacts import atomic_torch_save
    obj = {"w": torch.arange(6.0).reshape(2, 3), "extra": {"epochs": 1}}
    a = atomic_torch_save(obj, tmp_path / "a.pt").read_bytes()
    b = atomic_torch_save(obj, tmp_path / "a.pt").read_bytes()
    assert a == b
    assert torch.equal(torch.load(tmp_path / "a.pt")["w"], obj["w"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt"]  # no temp file left
