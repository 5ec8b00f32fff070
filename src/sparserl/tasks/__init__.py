"""Task records shared by every scale: one row per problem with columns
``id, problem, answer, source`` (plus ``level`` and ``generator`` for procedural tasks)."""
from sparserl.core.records import RECORD_COLUMNS
from sparserl.tasks.prompts import corpus_targets, format_prompt, format_target


__all__ = ["RECORD_COLUMNS", "corpus_targets", "format_prompt", "format_target"]
