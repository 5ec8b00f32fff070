"""Reading results from the command line: `sparserl show`, `methods`, `--version`, `figure --list`."""
import json

import pandas as pd
import pytest

from sparserl.cli import main
from sparserl.methods.spec import method_names


def test_show_a_checkpoint_folder(tmp_path, capsys):
    ckpt = tmp_path / "final"
    ckpt.mkdir()
    (ckpt / "sparserl.json").write_text(json.dumps({"method": "grpo_g4", "seed": 0, "step": 60}))
    (ckpt / "config.json").write_text(json.dumps({f"key_{i:03d}": "value " * 8 for i in range(100)}))
    (ckpt / ".snakemake_timestamp").write_text("")
    (ckpt / "model.safetensors").write_bytes(b"0" * 1000)
    assert main(["show", str(ckpt)]) == 0
    out = capsys.readouterr().out
    assert out.index('"method": "grpo_g4"') < out.index('"step": 60') < out.index("files: 3")
    assert ".snakemake_timestamp" not in out
    shown = [ln for ln in out.splitlines() if ln.startswith('    "key_')]
    assert len(shown) == 39 and all(ln.endswith('",') for ln in shown)  # whole lines, never cut mid-word
    assert f"... 62 more lines: sparserl show {ckpt / 'config.json'}" in out


def test_show_a_table_wraps_or_keeps_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = tmp_path / "runs.parquet"
    pd.DataFrame({f"column_{i}": [i * 1.5, i * 2.5] for i in range(19)}).to_parquet(path)
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    rows = out.partition("column_18  ")[2].splitlines()[1:]  # the rows, after the last column's stats
    assert len(rows) > 3 and max(len(ln) for ln in rows) <= 80 and "column_18" in "".join(rows)
    assert main(["show", str(path), "--columns", "column_3,column_7"]) == 0
    out = capsys.readouterr().out
    assert "column_3" in out and "column_7" in out and "column_4" not in out
    assert main(["show", str(path), "--columns", "nope"]) == 1
    assert "no column 'nope'; its columns: column_0" in capsys.readouterr().err


def test_show_a_jsonl_state_with_big_integers(tmp_path, capsys):
    """An OpenRLHF run's estimator_state.jsonl holds 128-bit RNG integers, which pandas' JSON parser
    refuses: read line by line, nested keys as dotted columns; a torn line is named."""
    path = tmp_path / "estimator_state.jsonl"
    rows = [{"step": 1, "calibration": {"prev_basis": None, "extra": {"tether_rho": 0.3}},
             "support_rng": {"state": {"state": 2 ** 127 + 1}}},
            {"step": 2, "calibration": {"prev_basis": None, "extra": {}}, "support_rng": None}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 rows" in out and "support_rng.state.state" in out and str(2 ** 127 + 1) in out
    assert "calibration.extra.tether_rho" in out
    path.write_text(path.read_text() + '{"step": 3, "cal')
    assert main(["show", str(path)]) == 1
    assert "estimator_state.jsonl: line 3 is not JSON" in capsys.readouterr().err


def test_methods_lists_every_method_file(capsys):
    assert main(["methods"]) == 0
    rows = {ln.split()[0]: ln.split() for ln in capsys.readouterr().out.splitlines()[1:] if ln.strip()}
    assert set(method_names()) <= set(rows)
    assert rows["grpo_median_g8"][1:4] == ["grpo_median", "8", "baselines"]
    assert rows["v05_osla"][1:4] == ["v05_fusion", "4", "v05"]
    assert rows["grpo_budget_v0"][1:4] == ["grpo", "8", "v0"]
    assert rows["lc_vf"][1:4] == ["gae", "8", "le_critique"]


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("sparserl 0.1.0")


def test_figure_list_is_grouped_by_paper_with_reasons(repo, capsys):
    main(["figure", "--config", str(repo / "configs/smoke.yaml"), "--list"])
    out = capsys.readouterr().out
    heads = [ln for ln in out.splitlines() if ln and not ln.startswith(" ")]
    assert {h.split(":")[0] for h in heads} >= {"v0", "v05", "le_critique", "basis"}
    assert "  v05/f1_accuracy_curves" in out and "left out: V0.5 Figure 1 needs an `rl` section" in out
