"""Benchmark loaders on the real paper files, bad-row errors, DAPO/HMMT schemas, download."""
from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from helpers.shared_data import BENCH_DIR
from sparserl.core.artifacts import read_manifest, write_table
from sparserl.data import benchmarks as B
from sparserl.data.benchmarks import (
    BENCHMARKS, PAPER_BENCHMARKS, RECORD_COLUMNS, clean_answer, load_benchmark,
    load_benchmark_dir, load_dapo_math, load_hmmt_feb_2025,
)
from sparserl.data.download import HUB_SOURCES, download_datasets

needs_data = pytest.mark.skipif(
    not BENCH_DIR.is_dir(),
    reason=f"real benchmark files absent: {BENCH_DIR} (../shared/data/benchmarks absent; "
           "set SPARSERL_SHARED_DATA to the folder holding benchmarks/)",
)

EXPECTED_ROWS = {"math500": 500, "aime24": 30, "aime25": 30, "amc23": 40,
                 "minerva_math": 272, "olympiadbench": 675}


@pytest.fixture(scope="module")
def real():
    if not BENCH_DIR.is_dir():
        pytest.skip(f"{BENCH_DIR} absent (../shared/data/benchmarks absent)")
    return load_benchmark_dir(BENCH_DIR, PAPER_BENCHMARKS)


# --------------------------------------------------------------------------- real files

@needs_data
@pytest.mark.parametrize("name", PAPER_BENCHMARKS)
def test_real_benchmark_schema(real, name):
    df = real[name]
    assert list(df.columns) == list(RECORD_COLUMNS)
    assert len(df) == EXPECTED_ROWS[name]
    assert df["id"].is_unique
    assert df["id"].str.startswith(name + "/").all()
    assert (df["source"] == name).all()
    for col in ("problem", "answer"):
        assert df[col].map(lambda s: isinstance(s, str) and s.strip() != "").all(), col
    # Delimiters never leak into answers.
    assert not df["answer"].str.startswith("$").any()


@needs_data
def test_amc_answers_are_integers(real):
    amc = real["amc23"]
    assert amc.loc[amc["id"] == "amc23/0", "answer"].item() == "27"
    assert not amc["answer"].str.endswith(".0").any()
    assert amc["answer"].str.fullmatch(r"-?\d+").all()


@needs_data
def test_aime_ids_and_zero_padding(real):
    a24 = real["aime24"]
    assert a24["id"].iloc[0] == "aime24/60"  # the file's own id
    assert "25" in set(a24["answer"]) and "025" not in set(a24["answer"])
    assert real["aime25"]["id"].iloc[0] == "aime25/0"  # no id field: row index
    assert real["aime25"]["answer"].iloc[0] == "70"


@needs_data
def test_math500_uses_unique_id(real):
    df = real["math500"]
    assert df["id"].iloc[0] == "math500/test/precalculus/807.json"
    assert df["answer"].iloc[0] == r"\left( 3, \frac{\pi}{2} \right)"


@needs_data
def test_minerva_answer_from_last_boxed_with_nested_braces(real):
    m = real["minerva_math"].set_index("id")
    assert m.loc["minerva_math/12", "answer"] == (
        r"\frac{2 \pi c^{2} R^{2}}{\lambda^{5}\left[e^{h c /(\lambda k T)}-1\right] d^{2}}")
    assert m.loc["minerva_math/0", "answer"] == "1.6"
    assert m.loc["minerva_math/35", "answer"] == r"\arcsin{1.3 \sin{\theta_w}}"
    # A stray "+$ $" inside one boxed answer is dropped.
    assert not m["answer"].str.contains(r"(?<!\\)\$").any()
    fixed = r"x_{0} \cos (\omega t)+ \dot{x}_{0} \sin (\omega t) / \omega"
    assert (m["answer"] == fixed).sum() == 1


@needs_data
def test_olympiad_list_answers(real):
    o = real["olympiadbench"].set_index("id")
    assert o.loc["olympiadbench/1606", "answer"] == "2"
    assert o.loc["olympiadbench/1610", "answer"] == r"\frac{1}{2 n+2}"
    # "$69$,$84$" in a one-element list
    assert "69,84" in set(o["answer"])
    assert not o["answer"].str.contains("$", regex=False).any()
    assert o.loc["olympiadbench/1606", "problem"].startswith("Xenia and Sergey")


@needs_data
def test_load_benchmark_dir_default_and_file_or_folder(real):
    all_ = load_benchmark_dir(BENCH_DIR)
    assert set(all_) == set(PAPER_BENCHMARKS)
    pd.testing.assert_frame_equal(load_benchmark("amc23", BENCH_DIR), real["amc23"])
    pd.testing.assert_frame_equal(load_benchmark("amc23", BENCH_DIR / "amc23.jsonl"),
                                  real["amc23"])


@needs_data
def test_parquet_original_schema_and_normalised_roundtrip(real, tmp_path):
    raw = pd.read_json(BENCH_DIR / "olympiadbench.jsonl", lines=True)
    raw.to_parquet(tmp_path / "olympiadbench.parquet", index=False)  # list column in parquet
    got = load_benchmark("olympiadbench", tmp_path / "olympiadbench.parquet")
    pd.testing.assert_frame_equal(got, real["olympiadbench"])
    write_table(real["minerva_math"], tmp_path / "minerva_math.parquet")
    pd.testing.assert_frame_equal(load_benchmark("minerva_math", tmp_path), real["minerva_math"])


# --------------------------------------------------------------------------- answer cleaning

@pytest.mark.parametrize("raw,want", [
    (27.0, "27"), (-1.0, "-1"), (0.5, "0.5"), ("025", "25"), ("27.0", "27"), (" 7 ", "7"),
    ("$2^{1009}$", "2^{1009}"), ("$69$,$84$", "69,84"), (["$1$", "$2$"], "1, 2"),
    (r"$(-\infty, 0) \cup\{1\}$.", r"(-\infty, 0) \cup\{1\}"), (None, ""), ([], ""),
    (r"\frac{1}{2}", r"\frac{1}{2}"), ("1.50", "1.50"), (12, "12"),
])
def test_clean_answer(raw, want):
    assert clean_answer(raw) == want


# --------------------------------------------------------------------------- bad rows

def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_invalid_json_names_file_and_line(tmp_path):
    f = _write_lines(tmp_path / "math500.jsonl", [
        json.dumps({"problem": "1+1?", "answer": "2", "unique_id": "a"}),
        '{"problem": "broken", "answer": ',
    ])
    with pytest.raises(ValueError, match=re.escape(f"{f}:2: not valid JSON") + ".*fix or delete"):
        load_benchmark("math500", f)


@pytest.mark.parametrize("name,bad,field", [
    ("math500", {"answer": "2", "unique_id": "x"}, "problem"),
    ("math500", {"problem": "p", "answer": "  ", "unique_id": "x"}, "answer"),
    ("aime25", {"problem": "p"}, "answer"),
    ("amc23", {"problem": "p", "answer": None, "id": 3}, "answer"),
    ("olympiadbench", {"question": "q", "final_answer": [], "id": 9}, "final_answer"),
    ("olympiadbench", {"final_answer": ["1"], "id": 9}, "question"),
    ("minerva_math", {"problem": "p", "solution": "so it is 5.", "idx": 1}, "solution"),
    ("minerva_math", {"problem": "p", "solution": r"\boxed{unclosed", "idx": 1}, "solution"),
    ("minerva_math", {"problem": "p", "idx": 1}, "solution"),
])
def test_bad_row_message_names_file_line_field_fix(tmp_path, name, bad, field):
    good = {"problem": "ok", "question": "ok", "answer": "1", "final_answer": ["1"],
            "solution": r"\boxed{1}", "id": 0, "idx": 0, "unique_id": "g"}
    f = _write_lines(tmp_path / f"{name}.jsonl", [json.dumps(good), "", json.dumps(bad)])
    with pytest.raises(ValueError) as ei:
        load_benchmark(name, f)
    msg = str(ei.value)
    assert f"{f}:3:" in msg  # blank line 2 skipped, the bad row is on line 3
    assert repr(field) in msg
    assert any(w in msg for w in ("give", "put", "add", "delete")), msg


def test_duplicate_ids_rejected(tmp_path):
    f = _write_lines(tmp_path / "aime24.jsonl", [
        json.dumps({"id": 5, "problem": "a", "answer": "1"}),
        json.dumps({"id": 5, "problem": "b", "answer": "2"}),
    ])
    with pytest.raises(ValueError, match=re.escape(f"{f}:2: field 'id' repeats id 'aime24/5' "
                                                   f"(first at {f}:1)")):
        load_benchmark("aime24", f)


def test_parquet_bad_row_names_row(tmp_path):
    f = tmp_path / "hmmt.parquet"
    pd.DataFrame({"problem_idx": [1, 2], "problem": ["p", "q"], "answer": ["3", ""]}).to_parquet(f)
    msg = f"{f}: row 2: field 'answer' is missing or empty"
    with pytest.raises(ValueError, match=re.escape(msg)):
        load_hmmt_feb_2025(f)


def test_unknown_benchmark_lists_known(tmp_path):
    with pytest.raises(ValueError, match=r"unknown benchmark 'gsm8k'; known: .*aime24.*math500"):
        load_benchmark("gsm8k", tmp_path)


def test_missing_file_and_bad_suffix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tasks.local_paths.amc23"):
        load_benchmark("amc23", tmp_path)
    (tmp_path / "x.csv").write_text("a\n")
    with pytest.raises(ValueError, match=r"unsupported benchmark file type '.csv'"):
        load_benchmark("amc23", tmp_path / "x.csv")
    with pytest.raises(FileNotFoundError, match="none of the benchmark files"):
        load_benchmark_dir(tmp_path)


# --------------------------------------------------------------------------- DAPO / HMMT

def _dapo_rows():
    def row(problem, answer, index):
        return {
            "data_source": "math_dapo",
            "prompt": [{"content": B.DAPO_PREFIX + problem + B.DAPO_SUFFIX, "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": index},
        }
    # The hub file repeats each prompt; the copies carry different indices.
    return [row("Find $1+1$.", "2", "a-1"), row("Find $2+2$.", "4", "b-1"),
            row("Find $1+1$.", "2", "a-2"), row("Compute $x$ if $x^2=9$, $x>0$.", "3", "c-1")]


def test_dapo_hub_schema_parquet(tmp_path):
    f = tmp_path / "dapo_math_17k.parquet"
    pd.DataFrame(_dapo_rows()).to_parquet(f, index=False)
    df = load_dapo_math(f)
    assert list(df.columns) == list(RECORD_COLUMNS)
    assert df["id"].tolist() == ["dapo_math_17k/a-1", "dapo_math_17k/b-1", "dapo_math_17k/c-1"]
    assert df["problem"].tolist()[0] == "Find $1+1$."  # instruction stripped
    assert df["answer"].tolist() == ["2", "4", "3"]
    assert (df["source"] == "dapo_math_17k").all()
    assert len(load_dapo_math(f, dedup=False)) == 4
    pd.testing.assert_frame_equal(load_benchmark("dapo_math_17k", tmp_path), df)


def test_dapo_missing_ground_truth(tmp_path):
    rows = _dapo_rows()
    rows[1]["reward_model"] = {"ground_truth": "", "style": "x"}
    f = tmp_path / "dapo.jsonl"
    _write_lines(f, [json.dumps(r) for r in rows])
    with pytest.raises(ValueError, match=re.escape(f"{f}:2: field 'reward_model.ground_truth'")):
        load_dapo_math(f)


def test_hmmt_schema(tmp_path):
    f = tmp_path / "hmmt_feb_2025.jsonl"
    _write_lines(f, [json.dumps({"problem_idx": i, "problem": f"P{i}", "answer": a,
                                 "problem_type": ["Algebra"]})
                     for i, a in [(1, "103"), (2, r"\frac{9\sqrt{3}}{2}")]])
    df = load_hmmt_feb_2025(f)
    assert df["id"].tolist() == ["hmmt_feb_2025/1", "hmmt_feb_2025/2"]
    assert df["answer"].tolist() == ["103", r"\frac{9\sqrt{3}}{2}"]


# --------------------------------------------------------------------------- download

def test_hub_sources_cover_all_names():
    assert set(HUB_SOURCES) == set(BENCHMARKS)
    for src in HUB_SOURCES.values():
        assert "/" in src["path"] and src["split"] in ("train", "test")


@pytest.mark.e2e  # ~18 s
@pytest.mark.two_cores  # 1.9 busy cores
@needs_data
def test_download_local_overrides_no_network(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # any hub use would fail
    overrides = {n: BENCH_DIR / BENCHMARKS[n] for n in PAPER_BENCHMARKS}
    written = download_datasets(tmp_path / "out", PAPER_BENCHMARKS, overrides,
                                cfg={"scale": "paper"})
    assert set(written) == set(PAPER_BENCHMARKS)
    for n, p in written.items():
        assert p == tmp_path / "out" / f"{n}.parquet"
        man = read_manifest(p)
        assert man["rows"] == EXPECTED_ROWS[n] and man["source"].startswith("local:")
        pd.testing.assert_frame_equal(pd.read_parquet(p), load_benchmark(n, overrides[n]))
    reloaded = load_benchmark_dir(tmp_path / "out")
    assert {n: len(d) for n, d in reloaded.items()} == EXPECTED_ROWS


class _FakeDataset:
    def __init__(self, rows):
        self._rows = rows

    def to_list(self):
        return list(self._rows)


def test_download_hub_calls_load_dataset(tmp_path, monkeypatch):
    calls = []
    hub_rows = {
        "HuggingFaceH4/MATH-500": [{"problem": "1+1", "answer": "2", "unique_id": "t/1.json"}],
        "MathArena/hmmt_feb_2025": [{"problem_idx": 1, "problem": "p", "answer": "5"}],
        "BytedTsinghua-SIA/DAPO-Math-17k": _dapo_rows(),
    }

    def load_dataset(path, **kw):
        calls.append((path, kw))
        return _FakeDataset(hub_rows[path])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    written = download_datasets(tmp_path, ["math500", "hmmt_feb_2025", "dapo_math_17k"])
    assert calls == [("HuggingFaceH4/MATH-500", {"split": "test"}),
                     ("MathArena/hmmt_feb_2025", {"split": "train"}),
                     ("BytedTsinghua-SIA/DAPO-Math-17k", {"split": "train"})]
    m = pd.read_parquet(written["math500"])
    assert m.to_dict("records") == [{"id": "math500/t/1.json", "problem": "1+1", "answer": "2",
                                     "source": "math500"}]
    assert len(pd.read_parquet(written["dapo_math_17k"])) == 3
    assert read_manifest(written["hmmt_feb_2025"])["source"] == "hub:MathArena/hmmt_feb_2025[train]"


def test_download_without_datasets_or_hub_says_set_local_path(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(RuntimeError, match=r"'datasets' package is not installed.*"
                                           r"tasks\.local_paths\.aime25"):
        download_datasets(tmp_path, ["aime25"])

    def offline(path, **kw):
        raise ConnectionError("Couldn't reach 'math-ai/aime25' on the Hub")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(RuntimeError, match=r"could not load math-ai/aime25.*ConnectionError.*"
                                           r"tasks\.local_paths\.aime25"):
        download_datasets(tmp_path, ["aime25"])
    assert not (tmp_path / "aime25.parquet").exists()


def test_download_unknown_name(tmp_path):
    with pytest.raises(ValueError, match=r"unknown dataset\(s\) 'gsm8k'"):
        download_datasets(tmp_path, ["gsm8k"])


def test_fetch_dataset_checks_golds_with_the_configs_verifier(tmp_path, monkeypatch):
    """The gold check runs with verifier.workers and verifier.timeout_s, the key its timeout
    error names."""
    from sparserl.data import download
    seen = {}

    def check(df, workers, timeout_s):
        seen.update(workers=workers, timeout_s=timeout_s)
        return []

    monkeypatch.setattr(download, "check_golds", check)
    monkeypatch.setattr(download, "fetch_from_hub", lambda name, cache_dir=None: pd.DataFrame(
        {"id": [f"{name}/0"], "problem": ["1+1"], "answer": ["2"], "source": [name]}))
    download.fetch_dataset("aime25", tmp_path / "a.parquet", cfg={"verifier": {"workers": 3, "timeout_s": 42.0}})
    assert seen == {"workers": 3, "timeout_s": 42.0}
    download.fetch_dataset("aime25", tmp_path / "b.parquet", cfg=None)  # no config: the schema's defaults
    from sparserl.core.config import schema_default
    assert seen == {"workers": schema_default("verifier", "workers"), "timeout_s": schema_default("verifier", "timeout_s")}


@needs_data
def test_fetch_for_config_uses_local_paths_and_the_hub(tmp_path, monkeypatch, repo):
    """The paper data stage: local files where the config names them, the hub elsewhere. Two of
    the six local files (the verifier's grading of every gold of all six is
    test_download_local_overrides_no_network's)."""
    from sparserl.core.config import load_config
    from sparserl.data import download
    from sparserl.core.paths import Paths
    cfg = load_config(repo / "configs/paper.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    local = ["aime24", "amc23"]
    cfg["tasks"]["local_paths"] = {n: str(BENCH_DIR / f"{n}.jsonl") for n in local}
    asked = []

    def fake_hub(name, cache_dir=None):
        asked.append(name)
        return pd.DataFrame({"id": [f"{name}/0"], "problem": ["1+1"], "answer": ["2"], "source": [name]})

    monkeypatch.setattr(download, "fetch_from_hub", fake_hub)
    P = Paths(cfg)
    download.fetch_for_config(cfg, pool=P.train_pool(), benchmarks=[P.benchmark(b) for b in P.benchmark_names()])
    assert sorted(asked) == sorted({"dapo_math_17k", *P.benchmark_names()} - set(local))
    assert len(pd.read_parquet(P.train_pool())) == 1 and len(pd.read_parquet(P.benchmark("math500"))) == 1
    for n in local:
        assert len(pd.read_parquet(P.benchmark(n))) == EXPECTED_ROWS[n]
        assert read_manifest(P.benchmark(n))["source"].startswith("local:")
    assert read_manifest(P.benchmark("hmmt_feb_2025"))["source"].startswith("hub:")


# ------------------------------------------------------------------------------------ layouts, bad input

def _rows(n=3):
    return [{"problem": f"p{i}", "answer": str(i), "unique_id": f"u{i}"} for i in range(n)]


def test_harness_folder_layout(tmp_path):
    """math-evaluation-harness: data/<name>/test.jsonl, given as the folder or its parent."""
    for name in ("math500", "amc23"):
        d = tmp_path / "data" / name
        d.mkdir(parents=True)
        _write_lines(d / "test.jsonl", [json.dumps(r) for r in _rows()])
    df = load_benchmark("math500", tmp_path / "data" / "math500")
    assert df["id"].tolist() == ["math500/u0", "math500/u1", "math500/u2"]
    assert load_benchmark("amc23", tmp_path / "data")["answer"].tolist() == ["0", "1", "2"]
    both = load_benchmark_dir(tmp_path / "data")
    assert set(both) == {"math500", "amc23"}
    # a lone test.jsonl in the folder given belongs to no benchmark by itself
    with pytest.raises(FileNotFoundError, match="none of the benchmark files"):
        load_benchmark_dir(tmp_path / "data" / "math500")


def test_json_array_file(tmp_path):
    f = tmp_path / "test.json"
    rows = [{"question": "q1", "final_answer": ["$1$"], "id": 1},
            {"question": "q2", "final_answer": ["2", "3"], "id": 2}]
    f.write_text(json.dumps(rows))
    df = load_benchmark("olympiadbench", f)
    assert df["answer"].tolist() == ["1", "2, 3"]
    (tmp_path / "olympiadbench").mkdir()
    (tmp_path / "olympiadbench" / "test.json").write_text(json.dumps(rows))
    pd.testing.assert_frame_equal(load_benchmark("olympiadbench", tmp_path / "olympiadbench"), df)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([rows[0], {"question": "q", "final_answer": {"v": 2}, "id": 3}]))
    with pytest.raises(ValueError, match=re.escape(f"{bad}: item 2: field 'final_answer' is a dict")):
        load_benchmark("olympiadbench", bad)


def test_dapo_gold_conflicts_counted_and_resolved(tmp_path):
    rows = _dapo_rows()
    extra = [dict(rows[0], reward_model={"ground_truth": "2"}, extra_info={"index": "a-3"}),
             dict(rows[0], reward_model={"ground_truth": "64"}, extra_info={"index": "a-4"}),
             dict(rows[1], reward_model={"ground_truth": "6"}, extra_info={"index": "b-2"})]
    f = tmp_path / "dapo_math_17k.jsonl"
    _write_lines(f, [json.dumps(r) for r in rows + extra])
    df = load_dapo_math(f)
    # "Find 1+1": 2, 2, 2, 64 -> majority 2 kept; "Find 2+2": 4 vs 6, a tie -> dropped.
    assert df["id"].tolist() == ["dapo_math_17k/a-1", "dapo_math_17k/c-1"]
    info = df.attrs["load_info"]
    assert info["gold_conflicts"] == 2 and info["gold_conflicts_dropped"] == 1
    assert info["duplicate_rows_dropped"] == 4
    assert "majority" in info["conflict_policy"] and "drop" in info["conflict_policy"]
    assert {"kept": "2", "golds": {"2": 3, "64": 1}}.items() <= info["conflicts"][0].items()


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_non_utf8_byte_names_file_and_line(tmp_path, suffix):
    f = tmp_path / f"amc23{suffix}"
    good = json.dumps({"problem": "p", "answer": "1", "id": 0}).encode()
    bad = json.dumps({"problem": "caf\u00e9", "answer": "2", "id": 1}).replace(
        "\\u00e9", "\u00e9").encode("latin-1")
    f.write_bytes(good + b"\n" + bad + b"\n" if suffix == ".jsonl"
                  else b"[" + good + b",\n" + bad + b"]")
    with pytest.raises(ValueError, match=re.escape(f"{f}:2: byte 0xe9 at column") + ".*UTF-8"):
        load_benchmark("amc23", f)


@pytest.mark.parametrize("gold,kind", [
    ({"value": 2}, "dict"), (True, "bool"), ([1, {"v": 2}], "dict"), ([[1, 2]], "list"),
])
def test_non_scalar_gold_rejected(tmp_path, gold, kind):
    f = _write_lines(tmp_path / "amc23.jsonl", [
        json.dumps({"problem": "p", "answer": "1", "id": 0}),
        json.dumps({"problem": "q", "answer": gold, "id": 1})])
    with pytest.raises(ValueError, match=re.escape(f"{f}:2: field 'answer' is a {kind}")
                       + ".*string or a number"):
        load_benchmark("amc23", f)


def test_dapo_non_scalar_ground_truth_rejected(tmp_path):
    rows = _dapo_rows()
    rows[2]["reward_model"] = {"ground_truth": {"value": 2}}
    f = _write_lines(tmp_path / "dapo.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(ValueError, match=re.escape(f"{f}:3: field 'reward_model.ground_truth' "
                                                   "is a dict")):
        load_dapo_math(f)


def test_huge_integer_gold_located(tmp_path):
    f = tmp_path / "aime25.jsonl"
    f.write_text(json.dumps({"problem": "p", "answer": "1"}) + "\n"
                 + '{"problem": "q", "answer": ' + "7" * 5000 + "}\n")
    with pytest.raises(ValueError, match=re.escape(f"{f}:2: ") + ".*4300 digits.*as a string"):
        load_benchmark("aime25", f)
    f.write_text(json.dumps({"problem": "q", "answer": "7" * 5000}) + "\n")  # as a string: fine
    assert load_benchmark("aime25", f)["answer"].iloc[0] == "7" * 5000


def test_garbled_golds_reported_in_load_info_and_manifest(tmp_path):
    pytest.importorskip("math_verify")
    from sparserl.data.download import fetch_dataset
    golds = ["17", r"\frac{1}{2}",
             r"\hbar \omega(v+1 / 2)-\frac{E_{0}^{2} e^{2}}{2 m \omega^{2}}"]
    f = _write_lines(tmp_path / "minerva_math.jsonl", [
        json.dumps({"problem": f"p{i}", "answer": g, "idx": i}) for i, g in enumerate(golds)])
    out = fetch_dataset("minerva_math", tmp_path / "out.parquet", f)
    info = read_manifest(out)["load_info"]
    assert [g["id"] for g in info["garbled_golds"]] == ["minerva_math/2"]
    assert info["rows_read"] == 3
    df = load_benchmark("minerva_math", f)
    assert B.check_golds(df)[0]["gold"] == golds[2]
    assert df.attrs["load_info"]["garbled_golds"][0]["id"] == "minerva_math/2"
