"""Hub models on local disk (rule fetch_models): every hub model the config names
(`Paths.hub_models`) is downloaded once, on the submit host, into its local directory. Compute
jobs then load those directories with HF_HUB_OFFLINE=1: nodes are often offline, and dozens of
concurrent jobs downloading into one shared HF cache race on its lock files."""
from __future__ import annotations

from pathlib import Path

from sparserl.core.logs import get_logger

_log = get_logger(__name__)


def fetch_models(models: dict[str, Path], *, download=None, log=_log.info) -> dict[str, Path]:
    """Download each hub model of `models` ({hub name: directory}, `Paths.hub_models`) into its
    directory (skipped when its config.json is there)."""
    if download is None:
        from huggingface_hub import snapshot_download

        def download(repo_id, local_dir):
            snapshot_download(repo_id=repo_id, local_dir=str(local_dir))
    out = {name: Path(path) for name, path in models.items()}
    for name, path in out.items():
        if (path / "config.json").exists():
            log(f"fetch-models: {name} already at {path}")
            continue
        log(f"fetch-models: {name} -> {path}")
        path.mkdir(parents=True, exist_ok=True)
        download(name, path)
        if not (path / "config.json").exists():
            raise RuntimeError(f"fetch-models: {name} downloaded to {path} without a config.json; "
                               "check the hub name in the config (policies.<name>.hf_name, "
                               "critique.policy_hub, models.hub)")
    return out
