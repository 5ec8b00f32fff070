"""Where a run's numbers go besides its tables, for people who follow runs in a dashboard:
TensorBoard (the run's tensorboard/ folder, whenever the `tensorboard` package is installed) and
Weights & Biases (only when `logging.wandb.enabled` and `wandb` imports; offline by default).

One run writes three things there: the training scalars of every step (the metrics.parquet
columns, under the same names), its hyperparameters once (the method spec and the RL settings,
flattened to dotted keys, as TensorBoard's HParams plugin reads them) and its evaluations:
`eval/accuracy` (and `eval/accuracy/<benchmark>`) at each evaluated checkpoint's step for the math
runs, `eval/heldout_reward` at the last step for Le Critique's runs.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from sparserl.core.artifacts import name_os_error
from sparserl.core.config import section_setting
from sparserl.core.logs import get_logger

_log = get_logger(__name__)

EVAL_SUFFIX = ".eval"  # the evaluation's event files: a rerun of the evaluation replaces them
HPARAM_TYPES = (bool, int, float, str)


def flatten(d: Any, prefix: str = "") -> dict[str, bool | int | float | str]:
    """A nested dict as {dotted.key: value} with the types TensorBoard's HParams plugin takes:
    numbers, booleans and strings as they are, lists as JSON text, None as "none"."""
    out: dict[str, bool | int | float | str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if d is None:
        out[prefix] = "none"
    elif isinstance(d, float) and not math.isfinite(d):
        out[prefix] = str(d)  # HParams' number field takes finite values only
    elif isinstance(d, HPARAM_TYPES):
        out[prefix] = d
    elif isinstance(d, (list, tuple)):
        out[prefix] = json.dumps(list(d), default=str)
    else:
        out[prefix] = str(d)
    return out


def _numeric(row: dict) -> dict[str, float]:
    """The row's numbers (not booleans, not the step), as floats."""
    return {k: float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)}


def wandb_settings(cfg: dict) -> dict:
    """The config's `logging.wandb`, with its defaults: disabled, project sparserl, offline."""
    w = (cfg.get("logging") or {}).get("wandb") or {}
    return {"enabled": bool(section_setting(w, "logging", "wandb", "enabled")),
            "project": section_setting(w, "logging", "wandb", "project"),
            "entity": w.get("entity"), "mode": section_setting(w, "logging", "wandb", "mode")}


def _wandb_run(cfg: dict, logdir: Path, name: str, hparams: dict | None, log: Callable):
    """A W&B run for this run folder (one id per folder, resumed by the evaluation), or None when
    the config does not enable W&B or `wandb` is not installed."""
    s = wandb_settings(cfg)
    if not s["enabled"]:
        return None
    try:
        import wandb
    except ImportError:
        log("logging.wandb.enabled is true but wandb is not installed (`pip install wandb`): "
            "logging to TensorBoard only")
        return None
    run_dir = Path(logdir).parent
    run_id = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]
    kw = {"project": s["project"], "mode": s["mode"], "dir": str(run_dir), "name": name, "id": run_id,
          "resume": "allow", "config": hparams or {}, "reinit": True}
    if s["entity"]:
        kw["entity"] = s["entity"]
    return wandb.init(**kw)


def _quiet_writer_threads() -> None:
    """TensorBoard's writer thread keeps a failed write's error for the main thread, which raises
    it at the next write, flush or close, and then re-raises it, so Python would also print the
    thread's traceback ("Exception in thread ..."). That print is skipped; every other thread's
    error is printed as before."""
    import threading
    try:
        from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread
    except ImportError:
        return
    inner = threading.excepthook
    if getattr(inner, "_sparserl", False):
        return

    def excepthook(args):
        if isinstance(args.thread, _AsyncWriterThread) and args.thread.exception is args.exc_value:
            return
        inner(args)

    excepthook._sparserl = True
    threading.excepthook = excepthook


def _after_earlier_files(logdir: Path) -> None:
    """Wait, if need be, until the second after the newest event file's. TensorBoard reads a
    folder's event files in name order, and a name starts with the second its writer opened
    (then host, pid and a counter that sorts as text, 10 before 9): a resumed run's file opened
    in the killed run's second could sort first, and its restart marker would then erase the
    steps logged after it."""
    stamps = [int(p.name.split(".")[3]) for p in logdir.glob("events.out.tfevents.*")
              if p.name.split(".")[3].isdigit()]
    while stamps and int(time.time()) <= max(stamps):
        time.sleep(0.05)


class RunLog:
    """TensorBoard (and W&B when enabled) for one run; every method is a no-op for a sink that
    is not there, so the training loop never asks.

    `purge_step`: a resumed run's first step; TensorBoard drops events at and past it that a
    killed run logged and will log again. `suffix`: the event files' suffix (EVAL_SUFFIX for an
    evaluation, which replaces the earlier evaluation's files first)."""

    def __init__(self, cfg: dict, logdir: str | Path, name: str, *, hparams: dict | None = None,
                 metrics: tuple[str, ...] = (), purge_step: int | None = None, suffix: str = "",
                 log: Callable = _log.info):
        self.logdir = Path(logdir)
        self.tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch's writer needs the tensorboard package (extra `cpu`)
            SummaryWriter = None
        if SummaryWriter is not None:
            _quiet_writer_threads()
            with self._named():
                if suffix:
                    for old in self.logdir.glob(f"events.out.tfevents.*{suffix}"):
                        old.unlink()
                _after_earlier_files(self.logdir)
                self.tb = SummaryWriter(str(self.logdir), purge_step=purge_step, filename_suffix=suffix)
        self.wandb = _wandb_run(cfg, self.logdir, name, hparams, log)
        self._eval_defined = False
        if hparams is not None:
            self.hparams(hparams, metrics)

    @contextlib.contextmanager
    def _named(self):
        """A failed write to the event files (raised here from TensorBoard's writer thread too)
        as one line with the file, the cause and the fix; the writer is dropped, so closing the
        run log does not raise it again."""
        try:
            yield
        except OSError as e:
            tb, self.tb = self.tb, None
            # the thread's write error names no file: the event file it appends to
            event_file = getattr(getattr(getattr(tb, "file_writer", None), "event_writer", None),
                                 "_file_name", None)
            if tb is not None:
                with contextlib.suppress(OSError):
                    tb.close()
            raise name_os_error(e, event_file or self.logdir) from None

    def hparams(self, hparams: dict, metrics: tuple[str, ...]) -> None:
        """The run's hyperparameters for TensorBoard's HParams dashboard, in this run's folder
        (SummaryWriter.add_hparams would write them to a subfolder of its own); `metrics`: the
        scalar tags the dashboard sets beside them."""
        if self.tb is None:
            return
        from torch.utils.tensorboard.summary import hparams as hparams_summary
        exp, ssi, sei = hparams_summary(hparams, {m: None for m in metrics})
        with self._named():
            writer = self.tb._get_file_writer()
            for summary in (exp, ssi, sei):
                writer.add_summary(summary)

    def scalars(self, row: dict, step: int) -> None:
        """Every numeric entry of `row` (a metrics.parquet row) at `step`, under its own name."""
        values = _numeric(row)
        if self.tb is not None:
            with self._named():
                for k, v in values.items():
                    self.tb.add_scalar(k, v, int(step))
        if self.wandb is not None:
            self.wandb.log(values, step=int(step))

    def evaluation(self, values: dict[str, float], step: int) -> None:
        """Evaluation scalars (tags `eval/...`) at the evaluated checkpoint's training step. W&B
        gets them against their own `eval/step`: its run's step has passed them by then."""
        if self.tb is not None:
            with self._named():
                for k, v in values.items():
                    self.tb.add_scalar(k, float(v), int(step))
        if self.wandb is not None:
            if not self._eval_defined:
                self.wandb.define_metric("eval/*", step_metric="eval/step")
                self._eval_defined = True
            self.wandb.log({**{k: float(v) for k, v in values.items()}, "eval/step": int(step)})

    def close(self) -> None:
        try:
            if self.tb is not None:
                with self._named():
                    self.tb.close()
                self.tb = None
        finally:
            if self.wandb is not None:
                self.wandb.finish()
                self.wandb = None

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
            return
        # the run already failed: its error is the one to report, not the event file's after it
        with contextlib.suppress(OSError):
            self.close()
