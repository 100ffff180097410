"""The model itself: operators, roofline, memory, parallelism, acceptance, trees, strategies, evaluate."""
