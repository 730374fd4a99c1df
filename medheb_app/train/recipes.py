"""The one registry of training recipes, read by the CLI (`train <recipe>`), the background
training job (services.train_job) and the admin panel's recipe picker.

A recipe is its name, what it is for, its config dataclass (flags and JSON come from it), how
to run it, and what the admin panel may set on it. Config classes and trainers import torch,
so both are resolved only when a recipe is used.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medheb_app.settings import Settings

Progress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class Recipe:
    """One way to train a checkpoint.

    `config` is "module:Class" of its config dataclass; `run(config, out, settings, progress,
    stop)` trains and saves; `job_fields` are the config fields the admin panel sets (epochs,
    and n for the report recipe); `spec` turns the saved card into the spec it loads with.
    """

    name: str
    help: str
    config: str
    run: Callable[[Any, Path, Settings, Progress | None, threading.Event | None], Any]
    job_fields: tuple[str, ...] = ("epochs",)
    spec: Callable[[dict], str] = lambda card: f"{card['name']}@{card['version']}"

    def config_class(self) -> type:
        module, _, name = self.config.partition(":")
        return getattr(importlib.import_module(module), name)


def _run_report(config, out, settings, progress, stop):
    # deferred: safetensors, torch
    from medheb_app.train.report import train_report

    return train_report(
        config,
        out,
        progress=progress,
        stop=stop,
        cache_dir=settings.cache_dir / "tower-features",
        settings=settings,
    )


def _run_label_aware(config, out, settings, progress, stop):
    # deferred: safetensors, torch
    from medheb_app.train.label_aware import train_label_aware

    return train_label_aware(config, out, settings, progress=progress, stop=stop)


def _run_medemb(config, out, settings, progress, stop):
    # deferred: safetensors, torch
    from medheb_app.train.medemb import train_medemb

    return train_medemb(config, out, settings, progress=progress, stop=stop)


def _medemb_spec(card: dict) -> str:
    # deferred: safetensors, torch
    from medheb_app.train.medemb import spec_for_card

    return spec_for_card(card)


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe(
            "report",
            "report matching on the phantom corpus (CLIP loss; the CXR-Retrieve baseline)",
            "medheb_app.train.report:ReportTrainingConfig",
            _run_report,
            job_fields=("epochs", "n"),
        ),
        Recipe(
            "label-aware",
            "label-aware fine-tuning (CXR-Retrieve eq. 7: soft label targets + conflict hinge)",
            "medheb_app.train.label_aware:LabelAwareConfig",
            _run_label_aware,
        ),
        Recipe(
            "medemb",
            "the MedEmb recipe (MedHEB section 4): one backbone for text, 2D, 3D and mixed "
            "inputs, masked InfoNCE, token-budgeted batching, LoRA; --model medemb-lite or "
            "mllm:/path",
            "medheb_app.train.medemb:MedEmbConfig",
            _run_medemb,
            spec=_medemb_spec,
        ),
    )
}


def get_recipe(name: str) -> Recipe:
    """A recipe by name; an unknown name lists the known ones."""
    if name not in RECIPES:
        raise ValueError(f"Unknown training recipe {name!r}; use {', '.join(RECIPES)}.")
    return RECIPES[name]
