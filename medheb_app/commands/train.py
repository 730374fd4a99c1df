"""`python -m medheb_app train <recipe> ... --out models/NAME`: train dual-lite checkpoints.

Each recipe of the registry (medheb_app.train.recipes) is a sub-subcommand whose flags come
from its config dataclass (plus --config FILE.json). Progress goes to stderr so that --json
keeps stdout to exactly one JSON document. The checkpoint registers itself under the spec its
recipe names ("dual-lite@<folder name>", "medemb-lite@<folder>").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.settings import Settings
from medheb_app.train.ablations import add_ablation_arguments, run_ablations
from medheb_app.train.config import add_config_arguments, config_from_sources
from medheb_app.train.recipes import RECIPES, Recipe

if TYPE_CHECKING:  # annotations only: train.contrastive imports torch, which --help must not
    from medheb_app.train.contrastive import Progress, TrainResult


def add_recipe(recipes: argparse._SubParsersAction, recipe: Recipe) -> argparse.ArgumentParser:
    """A `train <name>` subcommand with one flag per config field, --config and --out."""
    parser = recipes.add_parser(recipe.name, help=recipe.help, description=recipe.help)
    add_config_arguments(parser, recipe.config_class())
    parser.add_argument("--config", metavar="FILE.json", help="settings as a JSON object")
    parser.add_argument(
        "--out", required=True, help="checkpoint folder, e.g. models/NAME (its name is the tag)"
    )
    add_json_flag(parser)
    parser.set_defaults(handler=_handler(recipe))
    return parser


def _handler(recipe: Recipe) -> Callable[[argparse.Namespace, Settings], Any]:
    def handle(args: argparse.Namespace, settings: Settings) -> tuple[str, dict]:
        try:
            config = config_from_sources(recipe.config_class(), args.config, vars(args))
        except TypeError as error:
            raise UserError(f"Bad training settings: {error}") from error
        out = Path(args.out)
        try:
            result = recipe.run(config, out, settings, _print_progress(), None)
        except (FileNotFoundError, ValueError) as error:
            raise UserError(str(error)) from error
        return _summary(result, recipe.spec(result.card.to_dict()))

    return handle


def _print_progress(every: int = 20) -> Progress:
    def report(step: int, total: int, loss: float) -> None:
        if step == 1 or step == total or step % every == 0:
            print(f"step {step}/{total}  loss {loss:.4f}", file=sys.stderr, flush=True)

    return report


def _summary(result: TrainResult, spec: str) -> tuple[str, dict]:
    card = result.card
    assert card is not None
    val = "" if result.val_loss is None else f", validation loss {result.val_loss:.4f}"
    human = (
        f"Trained {spec} in {result.seconds:.0f} s: {result.steps} steps, "
        f"final epoch loss {result.final_loss:.4f}{val}.\n"
        f"Saved to {result.folder} (fingerprint {card.fingerprint}); "
        f"use it with --model {spec}."
    )
    payload = {
        "spec": spec,
        "folder": str(result.folder),
        "steps": result.steps,
        "epoch_losses": result.epoch_losses,
        "final_loss": result.final_loss,
        "val_loss": result.val_loss,
        "seconds": round(result.seconds, 1),
        "card": card.to_dict(),
    }
    return human, payload


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train dual-lite checkpoints", description="Train dual-lite checkpoints."
    )
    if getattr(subparsers, "shallow", False):  # `--help` lists commands: no torch for flags
        return
    recipes = parser.add_subparsers(dest="recipe", required=True, metavar="RECIPE")
    for recipe in RECIPES.values():
        add_recipe(recipes, recipe)
    ablations = recipes.add_parser(
        "ablations",
        help="CXR-Retrieve Table 4: train and score loss / caption-mix / tuning variants",
        description="Train every Table 4 variant of the label-aware recipe on the train split "
        "and score each on the test split (P@5 per regime, HNRR@5).",
    )
    add_ablation_arguments(ablations)
    add_json_flag(ablations)
    ablations.set_defaults(handler=run_ablations)
