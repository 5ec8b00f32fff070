"""RL engines: the local CPU trainer (`local`) and the OpenRLHF plugin (`openrlhf`), plus the
report that evaluates and summarises either engine's runs."""
