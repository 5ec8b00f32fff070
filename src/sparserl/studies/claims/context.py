"""The artifacts a claim measure reads, each read once (`Context`), the trees of other start
policies it pools, and the errors of reading them (`NotRun`, `MissingArtifact`, `BadArtifact`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sparserl.core.artifacts import read_table
from sparserl.core.paths import Paths


class NotRun(Exception):
    """The config does not make what the claim needs (the message says what)."""


class MissingArtifact(FileNotFoundError):
    """An artifact the config makes is not on disk (the message names it and the fix)."""


class BadArtifact(ValueError):
    """An artifact lacks a column a claim reads (the message names the file, the columns, the fix)."""


@dataclass
class Context:
    """The tree's layout (its config: `P.cfg`), and each artifact read once."""

    P: Paths
    _cache: dict = field(default_factory=dict, init=False)

    @property
    def cfg(self) -> dict:
        return self.P.cfg

    def trees(self) -> list:
        """This tree, then each start policy's tree of `head_to_head.pool` (`head_to_head.pool_trees`)."""
        if "trees" not in self._cache:
            self._cache["trees"] = pooled_trees(self.P)
        return self._cache["trees"]

    def table(self, path, need=()) -> pd.DataFrame:
        """The table at `path`; `need`: the columns the caller reads (a missing one is an error)."""
        path = Path(path)
        if path not in self._cache:
            if not path.exists():
                raise MissingArtifact(f"{path}: artifact not found; run `snakemake --cores 2 {path}` "
                                      f"(or the rule that makes it) with this config")
            self._cache[path] = read_table(path)
        df = self._cache[path]
        lacking = [c for c in need if c not in df.columns]
        if lacking:
            raise BadArtifact(f"{path}: no column(s) {lacking} (it has {list(df.columns)}); it was written by "
                              f"older code or by hand: delete it and rebuild it with `snakemake --cores 2 {path}`")
        return df

    def json(self, path) -> dict:
        path = Path(path)
        if path not in self._cache:
            if not path.exists():
                raise MissingArtifact(f"{path}: artifact not found; run `snakemake --cores 2 {path}` with this config")
            self._cache[path] = json.loads(path.read_text())
        return self._cache[path]


def pooled_trees(P: Paths) -> list:
    from sparserl.studies.head_to_head import HeadToHeadError, pool_trees
    try:
        return pool_trees(P)
    except HeadToHeadError as e:
        raise BadArtifact(str(e)) from None
