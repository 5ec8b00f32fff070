"""sparserl: advantage baselines for RLVR when rollouts are scarce (V0, V0.5, Le Critique, BASIS)."""
__version__ = "0.1.0"
