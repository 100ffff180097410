"""CLI subcommands beyond the core ones; each module defines ``register(subparsers, common)``."""
