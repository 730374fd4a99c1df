"""`python -m medheb_app ...`: a thin shell over the service functions.

Every command prints human text by default and exactly one JSON document with --json.
Errors become one readable line on stderr and a non-zero exit code, never a traceback.
Subcommands live in medheb_app/commands/, one module each, exposing `register(subparsers)`;
a handler returns (human_text, json_payload).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import typing
from collections.abc import Callable, Sequence
from typing import Any

import medheb_app
from medheb_app import commands
from medheb_app.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], tuple[str, Any]]


class UserError(Exception):
    """An error caused by the user's input; printed as one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors on one line ("error: ...; see ... --help"), as every
    other error of the CLI is, instead of the usage block and then the error."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


def build_parser(command: str | None = None, shallow: bool = False) -> argparse.ArgumentParser:
    """The whole parser, or (`command` given and known) only that command's subcommands: the
    train recipes import torch for their config flags, 5-10 s that `bench list` should not pay.
    `shallow` (main's top-level --help, or an unknown command) lets a command skip its own
    flags when more than one command is registered, so `--help` never imports torch."""
    modules = sorted(m.name for m in pkgutil.iter_modules(commands.__path__))
    if command is not None and command.replace("-", "_") in modules:
        modules = [command.replace("-", "_")]
    parser = OneLineParser(
        prog="python -m medheb_app",
        description="Clinical evidence retrieval workbench (MedHEB, CXR-Retrieve).",
    )
    parser.add_argument("--version", action="version", version=medheb_app.__version__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    # the whole parser only lists the commands (--help, a typo): a command may then skip
    # building its own flags (train: its recipes' config classes import torch)
    subparsers.shallow = shallow and len(modules) > 1  # type: ignore[attr-defined]
    for name in modules:
        importlib.import_module(f"{commands.__name__}.{name}").register(subparsers)
    return parser


class StderrProgress:
    """A build's progress as lines on stderr (stdout stays one JSON document): one line per new
    step (a message's first word: "embedding", "writing", ...) and one per 10%, so a long
    embedding pass prints a dozen lines, not thousands; and one at least every LIVENESS_S while
    a long step stays in one decile (reading a large DICOM folder's headers).
    `index build` and `demo build` use it."""

    LIVENESS_S = 10.0

    def __init__(self) -> None:
        self.last_step, self.last_decile, self.last_time = "", -1, 0.0

    def __call__(self, fraction: float, message: str) -> None:
        step = message.split(" ", 1)[0]
        decile = int(fraction * 10)
        now = time.monotonic()
        if (
            step != self.last_step
            or decile != self.last_decile
            or now - self.last_time >= self.LIVENESS_S
        ):
            print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)
            self.last_time = now
        self.last_step, self.last_decile = step, decile


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Every command takes --json; subcommands call this so the flag sits after them."""
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command, shallow=True)
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        human, payload = handler(args, Settings.from_env())
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except (UserError, ValueError, FileNotFoundError, KeyError, PermissionError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"error: {message}", file=sys.stderr)
        return 2
    except Exception as error:  # the contract is one line, never a traceback or a class name
        detail = str(error).strip() or "no further detail"
        print(f"error: the command failed unexpectedly ({detail})", file=sys.stderr)
        return 1
    if getattr(args, "json", False):
        print(json.dumps(payload, indent=2, default=_json_default))
    elif human:
        print(human)
    return 0


def _json_default(value: object) -> object:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
