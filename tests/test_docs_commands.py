"""Every `python -m medheb_app ...` command in the README and docs/ parses with the CLI as it
is, and the ones that run in seconds on the demo data succeed (issue 22 item 6): a renamed
flag or a dropped subcommand fails here instead of in a reader's terminal."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from medheb_app.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "python -m medheb_app "
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def documented_commands() -> list[tuple[str, str]]:
    """(where, argument string) for each documented command: continuation lines joined,
    comments, `[optional]` groups and `...` placeholders dropped, `a | b` alternatives split."""
    found: list[tuple[str, str]] = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            line = lines[i].strip().removeprefix("$ ")
            start = i
            i += 1
            if not line.startswith(PREFIX):
                continue
            while line.endswith("\\") and i < len(lines):
                line = line[:-1] + " " + lines[i].strip()
                i += 1
            line = re.sub(r"\s#\s.*$", "", line)  # a trailing comment
            while re.search(r"\[[^\[\]]*\]", line):  # [--optional FLAG], nested too
                line = re.sub(r"\[[^\[\]]*\]", "", line)
            first, *rest = (part.strip() for part in line.removeprefix(PREFIX).split(" | "))
            command = first.split()[0]
            for alternative in [first, *rest]:
                if alternative.split()[0] not in (command, first.split()[0]):
                    alternative = f"{command} {alternative}"  # "index list | index info nih"
                found.append((f"{path.name}:{start + 1}", alternative))
    return found


COMMANDS = documented_commands()


def test_the_docs_document_commands_at_all() -> None:
    assert len(COMMANDS) > 50
    assert {shlex.split(args)[0] for _, args in COMMANDS} >= {
        "bench", "cxr-retrieve", "demo", "index", "search", "study", "train",
    }  # fmt: skip


@pytest.mark.parametrize(("where", "args"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_documented_command_parses(where: str, args: str) -> None:
    argv = shlex.split(args.replace("...", "x"))
    try:
        build_parser(argv[0]).parse_args(argv)
    except SystemExit as error:
        pytest.fail(f"{where}: `{PREFIX}{args}` does not parse (exit {error.code})")


FAST = [  # documented commands that run in seconds on the demo data, exactly as written
    "bench list --json",
    "bench run --family T-T --model dual-lite --estimate",
    "study plan --preference 0.65 --raters 6 --votes-per-item 2",
]


@pytest.mark.parametrize("args", FAST)
def test_fast_documented_commands_succeed(args: str, settings, capsys) -> None:
    assert args in {a for _, a in COMMANDS} or any(a.startswith(args) for _, a in COMMANDS)
    assert main(shlex.split(args)) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip()
