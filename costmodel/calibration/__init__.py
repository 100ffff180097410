"""The model against published measurements: validation and the fit of the runtime profiles."""
