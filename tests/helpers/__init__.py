"""The tests' shared helpers, imported as `helpers.<module>`: pyproject's pytest `pythonpath`
puts tests/ on sys.path."""
