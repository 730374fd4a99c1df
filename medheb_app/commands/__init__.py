"""CLI subcommands: each module exposes `register(subparsers)`; cli.py discovers them."""
