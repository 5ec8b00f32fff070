"""Policies: the offline tokenizer and the tiny Qwen3 policies the DAG pre-trains."""
