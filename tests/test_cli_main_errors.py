"""cli.main: an unexpected failure is one line on stderr without the exception's class name."""

from __future__ import annotations

import argparse

import pytest

from medheb_app import cli


def _parser_with(handler):
    parser = argparse.ArgumentParser()
    parser.set_defaults(handler=handler)
    return parser


def _fail(args, settings):
    raise RuntimeError("FAISS could not train on 1 vector")


def test_an_unexpected_failure_is_one_line_without_a_class_name(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "build_parser", lambda name, **options: _parser_with(_fail))
    assert cli.main([]) == 1
    err = capsys.readouterr().err
    assert err == "error: the command failed unexpectedly (FAISS could not train on 1 vector)\n"
    assert "RuntimeError" not in err


@pytest.mark.parametrize("error", [ValueError("bad k"), KeyError("no such index")])
def test_a_user_error_exits_2_with_its_sentence(monkeypatch, capsys, error) -> None:
    def handler(args, settings):
        raise error

    monkeypatch.setattr(cli, "build_parser", lambda name, **options: _parser_with(handler))
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Error" not in err
