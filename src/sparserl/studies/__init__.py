"""Value-estimation studies on cached Monte Carlo rollouts (no rollout is generated here).

- `basis_value`: BASIS Section 5.1 / Appendix A: MSE of BASIS (G=1), REINFORCE++ (G=1), GRPO and
  RLOO (G=8) baselines against oracle values, binned by batch heterogeneity and prompt difficulty,
  the rate of baselines exactly 0 or 1, and BASIS's sensitivity to eps, n, B and the beta grid.
- `basis_checkpoints`: the same study on early / middle / late checkpoints of one RL run with the
  start policy as the reference, as the paper runs it (`basis.study_checkpoints`), per-stage MSE
  by method and BASIS Figure 2 (initial V^_beta vs refined V~_beta over the beta grid). The
  snapshot pair below (basis.study_reference/study_oracle) is then the stress test.
- `v05_stats`: the V0.5 statistics its paper does not report: measured bias/MSE of the fused
  baseline against the 1/sqrt(k) bound, the test's rejection rate and OSLA's budget under priors
  with a known offset, the cost sweep with stopping times and regret.
- `sparserl.cli.studies`: the `sparserl study-*` commands the Snakemake rules (workflow/rules/studies.smk)
  call. The figures drawn from these tables are registered in `sparserl.figures.studies`.

Data model shared by both studies: the "current" policy is the empirical distribution of its
cached oracle rollouts (n = 256 of checkpoint basis.study_oracle). A prompt's true value is then
exactly its oracle pass rate p, and an estimator's rewards are drawn WITHOUT replacement from the
cached list, so every estimator is measured against the exact mean of the population it samples
(finite-population variance factor (N - G)/(N - 1), 0.97 for G = 8 of 256). BASIS's reference
pass rates come from the other cache (n = 64 of basis.study_reference, an earlier checkpoint).

Settings live in the config under `basis.study`; `settings(cfg)` merges them over their
defaults in the schema ($defs/study: the paper's values).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_table
from sparserl.core.config import with_defaults
from sparserl.core.paths import StudyPaths

BASIS_TABLES = ("mse_by_method", "mse_by_heterogeneity", "mse_by_difficulty", "zero_one_rate")
BASIS_SENSITIVITY = ("eps", "n", "B", "grid")
V05_RUN_TABLES = ("budget_by_offset", "c_sweep", "stopping_hist")


def settings(cfg: dict) -> dict:
    """The config's `basis.study` merged over its schema defaults."""
    return with_defaults((cfg.get("basis") or {}).get("study"), "basis", "study")


def study_seed(cfg: dict) -> int:
    seed = settings(cfg).get("seed")
    return int(cfg["seed"] if seed is None else seed)


def study_refs(cfg: dict) -> tuple[str, str] | None:
    b = cfg.get("basis") or {}
    if b.get("study_reference") and b.get("study_oracle"):
        return b["study_reference"], b["study_oracle"]
    return None


def table_targets(SP: StudyPaths) -> list[Path]:
    """Every table CSV and both summaries (`snakemake studies` adds the study figures, which
    `sparserl.figures` registers; the checkpoint study's: `basis_checkpoints.targets`)."""
    out = [SP.summary("basis"), SP.summary("v05")]
    out += [SP.csv("basis", t) for t in BASIS_TABLES]
    out += [SP.csv("basis", f"sensitivity_{s}") for s in BASIS_SENSITIVITY]
    out += [SP.csv("v05", t) for t in ("bias_mse_by_k",) + V05_RUN_TABLES]
    return out

@dataclass
class StudyData:
    """Prompts present in both caches, as aligned arrays."""

    ids: np.ndarray  # (P,) prompt ids
    ref: np.ndarray  # (P, n_ref) reference rewards {0,1}, sampling order
    oracle: np.ndarray  # (P, n_oracle) oracle rewards {0,1}
    p: np.ndarray  # (P,) oracle pass rate = the current policy's true value
    ref_path: str = ""
    oracle_path: str = ""

    @property
    def n_prompts(self) -> int:
        return len(self.ids)


def _rewards_matrix(df: pd.DataFrame, path) -> np.ndarray:
    lens = df["rewards"].map(len).to_numpy()
    if len(lens) and (lens != lens[0]).any():
        raise ValueError(f"{path}: prompts have different numbers of cached rewards ({lens.min()}..{lens.max()})")
    m = np.array(df["rewards"].tolist(), dtype=np.uint8).reshape(len(df), lens[0] if len(lens) else 0)
    if not np.isin(m, (0, 1)).all():
        raise ValueError(f"{path}: rewards must be 0/1")
    if "n" in df and (df["n"].to_numpy() != m.shape[1]).any():
        raise ValueError(f"{path}: column n disagrees with the length of rewards")
    return m


def load_study_data(reference_path, oracle_path) -> StudyData:
    """Read both caches (schema: prompt_id, n, successes, phat, rewards) and keep common prompts."""
    ref = read_table(reference_path)
    orc = read_table(oracle_path)
    for name, df in (("reference", ref), ("oracle", orc)):
        missing = {"prompt_id", "rewards"} - set(df.columns)
        if missing:
            raise ValueError(f"{name} cache lacks columns {sorted(missing)}")
    common = sorted(set(ref["prompt_id"]) & set(orc["prompt_id"]))
    if not common:
        raise ValueError(f"{reference_path} and {oracle_path} share no prompt")
    ref = ref.drop_duplicates("prompt_id").set_index("prompt_id").loc[common].reset_index()
    orc = orc.drop_duplicates("prompt_id").set_index("prompt_id").loc[common].reset_index()
    r, o = _rewards_matrix(ref, reference_path), _rewards_matrix(orc, oracle_path)
    return StudyData(ids=np.asarray(common, dtype=object), ref=r, oracle=o, p=o.mean(axis=1),
                     ref_path=str(reference_path), oracle_path=str(oracle_path))


def difficulty_bins(p: np.ndarray, edges) -> np.ndarray:
    """Bin index of each p for edges [e0, e1, ..., eK]: [e_j, e_{j+1}), the last bin closed."""
    edges = np.asarray(edges, dtype=float)
    b = np.searchsorted(edges, p, side="right") - 1
    return np.clip(b, 0, len(edges) - 2)


def bin_labels(edges) -> list[str]:
    e = list(edges)
    return [f"[{e[j]:g},{e[j + 1]:g}{']' if j == len(e) - 2 else ')'}" for j in range(len(e) - 1)]
