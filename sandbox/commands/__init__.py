"""Subcommands of the `sandbox` CLI; each module exposes ``register(subparsers)``."""
