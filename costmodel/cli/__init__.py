"""Command-line front end: ``costmodel <command> ...`` (see main.py)."""

from costmodel.cli.main import main

__all__ = ["main"]
