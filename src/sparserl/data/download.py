"""Fetch the paper's datasets once, on a machine with internet, as normalised parquet tables.

`download_datasets` writes ``<out_dir>/<name>.parquet`` (record schema of
`sparserl.data.benchmarks`, with a manifest naming the source) for each requested name.  A name
with a local override path is loaded from that file instead, with no network, so a cluster
without hub access works from copied files (config: ``tasks.local_paths.<name>``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from sparserl.core.config import setting
from sparserl.core.artifacts import write_table
from sparserl.data.benchmarks import (
    BENCHMARKS, TRAIN_SETS, check_golds, load_benchmark, normalise_records,
)

#: name -> hub dataset id, config (None: default) and split.
HUB_SOURCES: dict[str, dict[str, Any]] = {
    "dapo_math_17k": {"path": "BytedTsinghua-SIA/DAPO-Math-17k", "name": None, "split": "train"},
    "hmmt_feb_2025": {"path": "MathArena/hmmt_feb_2025", "name": None, "split": "train"},
    "math500": {"path": "HuggingFaceH4/MATH-500", "name": None, "split": "test"},
    "aime24": {"path": "HuggingFaceH4/aime_2024", "name": None, "split": "train"},
    "aime25": {"path": "math-ai/aime25", "name": None, "split": "test"},
    "amc23": {"path": "math-ai/amc23", "name": None, "split": "test"},
    "minerva_math": {"path": "math-ai/minervamath", "name": None, "split": "test"},
    "olympiadbench": {"path": "math-ai/olympiadbench", "name": None, "split": "test"},
}
assert set(HUB_SOURCES) == set(BENCHMARKS)


def _override_hint(name: str) -> str:
    return (f"set tasks.local_paths.{name} in the config to a local .jsonl/.parquet copy "
            f"(e.g. the files in shared/data/benchmarks/) to load it without the hub")


def fetch_from_hub(name: str, cache_dir: str | os.PathLike | None = None):
    """Normalised DataFrame of ``name`` from the Hugging Face hub (needs `datasets` + internet)."""
    src = HUB_SOURCES[name]
    try:
        import datasets  # lazy: only the download machine needs it
    except ImportError as e:
        raise RuntimeError(f"{name}: the 'datasets' package is not installed "
                           f"(pip install 'sparserl[cluster]'); or {_override_hint(name)}") from e
    kwargs: dict[str, Any] = {"split": src["split"]}
    if src.get("name"):
        kwargs["name"] = src["name"]
    if cache_dir is not None:
        kwargs["cache_dir"] = str(cache_dir)
    try:
        ds = datasets.load_dataset(src["path"], **kwargs)
    except Exception as e:  # offline, DNS, 404, auth: all mean "use a local copy"
        raise RuntimeError(f"{name}: could not load {src['path']} (split {src['split']!r}) from "
                           f"the Hugging Face hub: {type(e).__name__}: {e}; "
                           f"{_override_hint(name)}") from e
    origin = f"hub:{src['path']}[{src['split']}]"
    records = ds.to_list() if hasattr(ds, "to_list") else list(ds)
    rows = ((f"{origin} row {i}", dict(r)) for i, r in enumerate(records, 1))
    return normalise_records(name, rows, origin=origin, dedup_problems=name in TRAIN_SETS)


def download_datasets(out_dir: str | os.PathLike, names: Iterable[str] | None = None,
                      local_overrides: dict[str, str | os.PathLike] | None = None, *,
                      cfg: Any = None, cache_dir: str | os.PathLike | None = None
                      ) -> dict[str, Path]:
    """Write ``<out_dir>/<name>.parquet`` for each name (default: all of `HUB_SOURCES`).

    A name in ``local_overrides`` is read from that file with the benchmark loader (no network);
    the others come from the hub.  Returns name -> written path.  Raises RuntimeError, naming
    the config key to set, when the hub cannot be used.
    """
    names = list(HUB_SOURCES) if names is None else list(names)
    overrides = {k: v for k, v in (local_overrides or {}).items() if v}
    unknown = [n for n in list(names) + list(overrides) if n not in HUB_SOURCES]
    if unknown:
        raise ValueError(f"unknown dataset(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(sorted(HUB_SOURCES))}")
    out = Path(out_dir)
    return {n: fetch_dataset(n, out / f"{n}.parquet", overrides.get(n), cfg=cfg,
                             cache_dir=cache_dir) for n in names}


def fetch_dataset(name: str, out_path: str | os.PathLike, local_path=None, *, cfg: Any = None,
                  cache_dir: str | os.PathLike | None = None) -> Path:
    """Write one normalised dataset to `out_path`: from `local_path` if given, else the hub."""
    if local_path:
        df = load_benchmark(name, local_path)
        source = f"local:{Path(local_path).resolve()}"
    else:
        df = fetch_from_hub(name, cache_dir=cache_dir)
        source = f"hub:{HUB_SOURCES[name]['path']}[{HUB_SOURCES[name]['split']}]"
    # Garbled golds are graded by string match: say which, where the run's data is recorded.
    # The config's verifier settings apply: a gold that times out twice names verifier.timeout_s.
    ver = cfg if isinstance(cfg, dict) else {}
    garbled = check_golds(df, workers=setting(ver, "verifier", "workers"),
                          timeout_s=setting(ver, "verifier", "timeout_s"))
    info = dict(df.attrs.get("load_info", {}))
    _say(name, info, garbled)
    df.attrs = {}  # the manifest carries it; keep the parquet metadata plain
    return write_table(df, out_path, cfg=cfg, extra={"dataset": name, "source": source,
                                                     "load_info": info})


def _say(name: str, info: dict, garbled: list[dict]) -> None:
    """One summary line per dataset, and one per garbled gold."""
    parts = [f"{name}: {info.get('rows_read', '?')} rows read"]
    if "duplicate_rows_dropped" in info:
        parts.append(f"{info['duplicate_rows_dropped']} duplicate rows dropped; "
                     f"{info['gold_conflicts']} problems with conflicting golds "
                     f"({info['gold_conflicts_dropped']} dropped on a tie; policy: "
                     f"{info['conflict_policy']})")
    parts.append(f"{len(garbled)} garbled golds (graded by normalised string match)")
    print("; ".join(parts))
    for g in garbled:
        print(f"  garbled gold {g['id']}: {g['gold']!r}: {g['reason']}")


def fetch_for_config(cfg: dict, *, pool, benchmarks) -> None:
    """The paper-scale data stage: the training pool into `pool`, each benchmark of the config into
    its file of `benchmarks` (`tasks/benchmarks/<name>.parquet`, `Paths.benchmark`)."""
    t = cfg["tasks"]
    local = t.get("local_paths", {})
    train = t["train_pool"]["dataset"]
    fetch_dataset(train, Path(pool), local.get(train), cfg=cfg)
    for path in benchmarks:
        name = Path(path).stem
        fetch_dataset(name, Path(path), local.get(name), cfg=cfg)
    print(f"datasets -> {Path(pool).parent}")


__all__ = ["HUB_SOURCES", "download_datasets", "fetch_dataset", "fetch_for_config", "fetch_from_hub"]
