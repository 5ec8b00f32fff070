"""The local RL trainer (CPU; tiny and small scales)."""
