"""`python -m medheb_app train <recipe> ... --out models/NAME`: train dual-lite checkpoints.

Each recipe is a sub-subcommand whose flags come from its config dataclass (plus --config
FILE.json); add one with `add_recipe`. Progress goes to stderr so that --json keeps stdout to
exactly one JSON document. The checkpoint registers itself as "dual-lite@<folder name>".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.settings import Settings
from medheb_app.train.config import add_config_arguments, config_from_sources
from medheb_app.train.contrastive import Progress, TrainResult

Runner = Callable[[Any, Path, Settings, Progress], TrainResult]


def add_recipe(
    recipes: argparse._SubParsersAction,
    name: str,
    config_cls: type,
    runner: Runner,
    help_text: str,
) -> argparse.ArgumentParser:
    """A `train <name>` subcommand with one flag per config field, --config and --out."""
    parser = recipes.add_parser(name, help=help_text, description=help_text)
    add_config_arguments(parser, config_cls)
    parser.add_argument("--config", metavar="FILE.json", help="settings as a JSON object")
    parser.add_argument(
        "--out", required=True, help="checkpoint folder, e.g. models/NAME (its name is the tag)"
    )
    add_json_flag(parser)
    parser.set_defaults(handler=_handler(config_cls, runner))
    return parser


def _handler(config_cls: type, runner: Runner) -> Callable[[argparse.Namespace, Settings], Any]:
    def handle(args: argparse.Namespace, settings: Settings) -> tuple[str, dict]:
        try:
            config = config_from_sources(config_cls, args.config, vars(args))
        except TypeError as error:
            raise UserError(f"Bad training settings: {error}") from error
        out = Path(args.out)
        result = runner(config, out, settings, _print_progress())
        if result.card is None:
            raise UserError(f"Training was cancelled after {result.steps} steps; nothing saved.")
        return _summary(result)

    return handle


def _print_progress(every: int = 20) -> Progress:
    def report(step: int, total: int, loss: float) -> None:
        if step == 1 or step == total or step % every == 0:
            print(f"step {step}/{total}  loss {loss:.4f}", file=sys.stderr, flush=True)

    return report


def _summary(result: TrainResult) -> tuple[str, dict]:
    card = result.card
    assert card is not None
    spec = f"{card.name}@{card.version}"
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


def _run_report(config: Any, out: Path, settings: Settings, progress: Progress) -> TrainResult:
    from medheb_app.train.report import train_report

    return train_report(
        config, out, progress=progress, cache_dir=settings.cache_dir / "tower-features"
    )


def _run_label_aware(config: Any, out: Path, settings: Settings, progress: Progress) -> TrainResult:
    from medheb_app.train.label_aware import train_label_aware

    return train_label_aware(config, out, settings, progress=progress)


def _run_medemb(config: Any, out: Path, settings: Settings, progress: Progress) -> TrainResult:
    from medheb_app.train.medemb import train_medemb

    try:
        return train_medemb(config, out, settings, progress=progress)
    except (FileNotFoundError, ValueError) as error:
        raise UserError(str(error)) from error


def _medemb_handler(args: argparse.Namespace, settings: Settings) -> tuple[str, dict]:
    """The generic handler, with the spec a MedEmb checkpoint actually loads with."""
    from medheb_app.train.medemb import MedEmbConfig, spec_for_card

    human, payload = _handler(MedEmbConfig, _run_medemb)(args, settings)
    spec = spec_for_card(payload["card"])
    human = human.replace(payload["spec"], spec)
    payload["spec"] = spec
    return human, payload


def register(subparsers: argparse._SubParsersAction) -> None:
    from medheb_app.train.ablations import add_ablation_arguments, run_ablations
    from medheb_app.train.label_aware import LabelAwareConfig
    from medheb_app.train.report import ReportTrainingConfig

    parser = subparsers.add_parser(
        "train", help="train dual-lite checkpoints", description="Train dual-lite checkpoints."
    )
    recipes = parser.add_subparsers(dest="recipe", required=True, metavar="RECIPE")
    add_recipe(
        recipes,
        "report",
        ReportTrainingConfig,
        _run_report,
        "report matching on the phantom corpus (CLIP loss; the CXR-Retrieve baseline)",
    )
    add_recipe(
        recipes,
        "label-aware",
        LabelAwareConfig,
        _run_label_aware,
        "label-aware fine-tuning (CXR-Retrieve eq. 7: soft label targets + conflict hinge)",
    )
    from medheb_app.train.medemb import MedEmbConfig

    medemb = add_recipe(
        recipes,
        "medemb",
        MedEmbConfig,
        _run_medemb,
        "the MedEmb recipe (MedHEB section 4): one backbone for text, 2D, 3D and mixed inputs, "
        "masked InfoNCE, token-budgeted batching, LoRA; --model medemb-lite or mllm:/path",
    )
    medemb.set_defaults(handler=_medemb_handler)
    ablations = recipes.add_parser(
        "ablations",
        help="CXR-Retrieve Table 4: train and score loss / caption-mix / tuning variants",
        description="Train every Table 4 variant of the label-aware recipe on the train split "
        "and score each on the test split (P@5 per regime, HNRR@5).",
    )
    add_ablation_arguments(ablations)
    add_json_flag(ablations)
    ablations.set_defaults(handler=run_ablations)
