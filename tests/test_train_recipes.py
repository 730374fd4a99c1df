"""One recipe registry: the CLI, the training job and the admin panel list the same recipes."""

from __future__ import annotations

import threading

import pytest

from medheb_app.cli import build_parser
from medheb_app.services.admin_jobs import train_job
from medheb_app.train.recipes import RECIPES, get_recipe
from medheb_app.ui import admin_tab


def _cli_recipes() -> set[str]:
    parser = build_parser()
    train = next(
        action.choices["train"]
        for action in parser._subparsers._group_actions  # type: ignore[union-attr]
        if "train" in getattr(action, "choices", {})
    )
    recipes = next(a for a in train._subparsers._group_actions)  # type: ignore[union-attr]
    return set(recipes.choices) - {"ablations"}


def test_cli_job_and_admin_read_the_same_registry() -> None:
    assert _cli_recipes() == set(RECIPES) == set(admin_tab.TRAIN_RECIPES)
    assert {"report", "label-aware", "medemb"} <= set(RECIPES)
    for recipe in RECIPES.values():
        config = recipe.config_class()
        assert set(recipe.job_fields) <= set(config.__dataclass_fields__)


def test_unknown_recipe_is_one_clear_error(settings) -> None:
    with pytest.raises(ValueError, match="Unknown training recipe 'nope'; use report"):
        get_recipe("nope")
    with pytest.raises(ValueError, match="Unknown training recipe"):
        train_job(settings)({"recipe": "nope", "tag": "x"}, print, print, threading.Event())


def test_medemb_spec_comes_from_its_recipe() -> None:
    card = {"name": "medemb-lite", "version": "t1", "weights": "/w/t1"}
    assert RECIPES["medemb"].spec(card) == "medemb-lite@/w/t1"
    assert RECIPES["report"].spec({"name": "dual-lite", "version": "t1"}) == "dual-lite@t1"


def test_model_cache_evicts_a_superseded_checkpoint(settings, monkeypatch) -> None:
    from medheb_app.models import registry

    loads: list[int] = []
    stamp = {"value": 1}

    def resolve(spec, settings):
        key = ("dual-lite", "/models/x", stamp["value"])
        return key, lambda: loads.append(stamp["value"]) or object()

    monkeypatch.setattr(registry, "_resolve", resolve)
    monkeypatch.setattr(registry, "_CACHE", {("open_clip:a",): object()})
    first = registry.load_embedder("dual-lite@x", settings)
    assert registry.load_embedder("dual-lite@x", settings) is first and loads == [1]
    stamp["value"] = 2  # the weights file was rewritten
    second = registry.load_embedder("dual-lite@x", settings)
    assert second is not first and loads == [1, 2]
    from medheb_app.models.device import resolve_device

    device = resolve_device(settings.device)  # embedders are cached per device and precision
    cached = ("dual-lite", "/models/x", 2, device, settings.precision)
    assert set(registry._CACHE) == {("open_clip:a",), cached}
