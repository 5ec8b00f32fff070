"""Grading: the verifier that turns a response and a gold answer into a reward."""
