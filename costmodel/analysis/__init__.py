"""Tools on top of the engine: sweeps, claim checks, recommendations, capacity plans, plots, probe, scenarios."""
