"""Vectorisation helpers that call the engine's term functions (never restate them), and forked sweeps."""
