"""Settings.default_model: "auto" (the default) resolves to the strongest model built for the
index searched, or the strongest shipped model for a build; a pinned spec wins everywhere
(search, `index build` without --model, the demo build, the admin pickers)."""

from __future__ import annotations

import json

import pytest

from medheb_app.cli import main
from medheb_app.models.registry import list_models
from medheb_app.serving import (
    BASE_MODEL,
    LABEL_AWARE_SPEC,
    build_default_model,
    default_demo_models,
    default_model,
)
from medheb_app.settings import Settings


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDHEB_DEFAULT_MODEL", raising=False)
    monkeypatch.delenv("MEDHEB_DEMO_MODELS", raising=False)


def test_auto_is_the_default_and_a_spec_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env().default_model == "auto"
    assert Settings.from_env().pinned_model is None
    monkeypatch.setenv("MEDHEB_DEFAULT_MODEL", " ")
    assert Settings.from_env().pinned_model is None  # blank reads as auto
    monkeypatch.setenv("MEDHEB_DEFAULT_MODEL", "random")
    assert Settings.from_env().pinned_model == "random"


def test_auto_picks_the_strongest_shipped_model_when_nothing_is_built(settings: Settings) -> None:
    listed = {entry["spec"] for entry in list_models(settings)}
    strongest = LABEL_AWARE_SPEC if LABEL_AWARE_SPEC in listed else BASE_MODEL
    assert build_default_model(settings) == strongest
    assert default_model(settings, "no-such-index") == strongest
    assert default_demo_models(settings)[0] == BASE_MODEL  # the demo still builds dual-lite


def test_auto_picks_the_model_an_index_was_built_with(
    settings: Settings, capsys: pytest.CaptureFixture
) -> None:
    """An index built only for `random`: "auto" searches it with random (a fixed default
    would name a model that has no build of it and fail)."""
    argv = ["index", "build", "--source", "phantom:12", "--model", "random", "--name", "tiny"]
    assert main([*argv, "--json"]) == 0
    capsys.readouterr()
    assert default_model(settings, "tiny") == "random"
    assert main(["search", "--text", "cardiomegaly", "--index", "tiny", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "random"


def test_a_pinned_spec_reaches_search_index_build_and_demo(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("MEDHEB_DEFAULT_MODEL", "random")
    pinned = Settings.from_env()
    assert default_model(pinned, "anything") == "random"
    assert build_default_model(pinned) == "random"
    assert default_demo_models(pinned)[0] == "random"
    assert main(["index", "build", "--source", "phantom:12", "--name", "pin", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "random"
