"""Command-line front end: ``costmodel <command> ...`` (entry point :func:`costmodel.cli.main.main`)."""
