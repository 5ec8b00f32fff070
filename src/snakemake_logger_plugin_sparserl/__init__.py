"""Snakemake logger plugin `sparserl`: config-file errors that name the file, line and column.

Snakemake parses every `--configfile` in its command line, before any Snakefile code runs, and
reports a YAML syntax error there only as "Config file is not valid JSON or YAML". It imports every
installed logger plugin while it builds that command line, earlier still, so this package (found
by Snakemake's `snakemake_logger_plugin_` prefix) wraps the config-file parser at import: a file
that fails to parse (or holds a byte that is not UTF-8, which Snakemake reports as a traceback)
is read again by `sparserl.core.config.read_yaml`, and Snakemake's error then
says where the problem is and how to fix it. Files that parse are untouched; a file
that does not exist or is a folder (a target written after `--configfile`, which takes every word
after it) gets one line saying so, where Snakemake let a traceback out; other errors (not a
mapping) keep Snakemake's message. It also lets `--config` take dotted
keys (`--config rl.steps=20`, `_install_dotted_config`).

As a logger (`snakemake --logger sparserl ...`) it writes Snakemake's messages in sparserl's one
log format (`sparserl.core.logs.FORMAT`) on stderr.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from snakemake_interface_logger_plugins.base import LogHandlerBase

__all__ = ["LogHandler", "locate_config_error"]


def locate_config_error(path) -> str | None:
    """"<file>, line L, column C: not valid YAML: ...; fix the YAML there" for a config file that
    does not parse, else None."""
    if not isinstance(path, (str, Path)) or not Path(path).is_file():
        return None
    from sparserl.core.config import ConfigError, read_yaml
    try:
        read_yaml(path)
    except ConfigError as e:
        return str(e)
    except Exception:  # noqa: BLE001 - never hide Snakemake's own error behind ours
        return None
    return None


def _install() -> None:
    try:
        from snakemake.common import configfile
        from snakemake_interface_common.exceptions import WorkflowError
    except ImportError:  # a Snakemake without this module: its own messages stay
        return
    inner = configfile._load_configfile
    if getattr(inner, "_sparserl", False):
        return

    def load_configfile_located(configpath_or_obj, filetype="Config"):
        try:
            return inner(configpath_or_obj, filetype=filetype)
        except (FileNotFoundError, IsADirectoryError) as e:
            # Snakemake lets open()'s error out as a traceback; the usual cause is a target
            # written after --configfile, which takes every word after it
            if not isinstance(configpath_or_obj, (str, Path)):
                raise
            what = "is a folder" if isinstance(e, IsADirectoryError) else "does not exist"
            raise WorkflowError(f"{filetype} file {configpath_or_obj} {what}; --configfile reads every word "
                                "after it as a config file: put targets before it (snakemake <targets> "
                                "--cores 2 --configfile <files>)") from None
        except (WorkflowError, UnicodeDecodeError) as e:
            # a byte that is not UTF-8 escapes Snakemake's parse as a raw UnicodeDecodeError
            # (json.load swallows it as a ValueError, the YAML retry does not)
            where = locate_config_error(configpath_or_obj)
            if where is None:
                if isinstance(e, UnicodeDecodeError):
                    raise WorkflowError(f"{filetype} file {configpath_or_obj} is not UTF-8 ({e.reason}); "
                                        "save the file as UTF-8") from None
                raise
            raise WorkflowError(f"{filetype} file {where} (`python -m sparserl.core.config "
                                f"{configpath_or_obj}` checks it)") from (e if isinstance(e, WorkflowError) else None)

    load_configfile_located._sparserl = True
    # load_configfile looks `_load_configfile` up in its module at each call
    configfile._load_configfile = load_configfile_located


_install()


def _install_dotted_config() -> None:
    """`--config rl.steps=20`: Snakemake's command line refuses a dotted key ("Config entry must
    start with a valid identifier"), before any Snakefile code runs. A dotted key of identifiers
    passes through as a flat key with its text unparsed; the Snakefile nests it and types it by
    the config schema (`sparserl.core.config.from_snakemake`), so a wrong type names the entry."""
    import re
    try:
        from snakemake import cli
    except ImportError:
        return
    inner = cli.parse_config
    if getattr(inner, "_sparserl", False):
        return
    ident = re.compile(r"[A-Za-z_][\w-]*\w$|[A-Za-z_]$")

    def parse_config_dotted(entries):
        dotted, rest = {}, []
        for entry in entries or []:
            key, sep, value = str(entry).partition("=")
            if sep and "." in key and all(ident.match(part) for part in key.split(".")):
                dotted[key] = value
            else:
                rest.append(entry)
        out = inner(rest)
        out.update(dotted)
        return out

    parse_config_dotted._sparserl = True
    cli.parse_config = parse_config_dotted  # args_to_api looks it up in its module at each call


_install_dotted_config()


class LogHandler(LogHandlerBase):
    """Snakemake's records in sparserl's log format, on stderr."""

    def __post_init__(self) -> None:
        from sparserl.core.logs import DATEFMT, FORMAT
        self.setFormatter(logging.Formatter(FORMAT.replace("%(name)s", "snakemake"), DATEFMT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never stop the workflow
            self.handleError(record)

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return False

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False
