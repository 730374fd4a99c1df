"""Table 4 of CXR-Retrieve as one command: train each variant, evaluate it, print the table.

Blocks (each varies one choice; "ours" is the anchor: the label-aware recipe's defaults, i.e.
label-aware loss, 2:1:1 mix, text-tower LoRA, heads started from the report checkpoint,
profile kernel):
- Loss: CLIP (diagonal only) / + Attract (eq. 5) / + HNM (eq. 7, ours)
- Caption mix: single-only / pair-only / negation-only / 2:1:1 (ours)
- Tuning: heads only on frozen towers / text-tower LoRA rank 12
- Initialisation: fresh heads / the report-trained checkpoint. The paper's block varies the
  backbone's pretraining (OpenCLIP vs in-domain CXR-CLIP); here both towers are the same
  pretrained ones, and what the in-domain report training adds lives in the heads, so the
  nearest honest analogue is starting from fresh heads vs the report-trained ones.
- Kernel (beyond the paper): the paper's caption-caption K (eq. 4) / the image-profile K.
Every variant trains on the train split with the same seed and is scored on the test split.
A variant whose checkpoint folder already holds a run with the same settings is reused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from medheb_app.settings import Settings
from medheb_app.train.config import config_to_dict

OURS = {"loss": "label-aware", "mix": "2:1:1"}
VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("Loss", "CLIP loss (diag.)", {"loss": "clip"}),
    ("Loss", "+ Attract", {"loss": "attract"}),
    ("Loss", "+ HNM (ours)", {}),
    ("Caption mix", "single-only", {"mix": "1:0:0"}),
    ("Caption mix", "pair-only", {"mix": "0:1:0"}),
    ("Caption mix", "negation-only", {"mix": "0:0:1"}),
    ("Caption mix", "2:1:1 (ours)", {}),
    ("Tuning", "heads only, frozen towers", {"tune": "frozen"}),
    ("Tuning", "text-tower LoRA r=12", {"tune": "lora"}),
    ("Initialisation", "fresh heads", {"init": ""}),
    ("Initialisation", "report checkpoint", {"init": "dual-lite@report"}),
    ("Kernel", "caption kernel (paper eq. 4)", {"kernel": "caption"}),
    ("Kernel", "profile kernel", {"kernel": "profile"}),
]


def add_ablation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default="phantom", help="phantom | nih:PATH | mimic:PATH")
    parser.add_argument("--out", required=True, help="folder for checkpoints and results.json")
    parser.add_argument("--epochs", type=int, default=None, help="override training epochs")
    parser.add_argument("--seed", type=int, default=0, help="training seed for every variant")
    parser.add_argument(
        "--tune",
        choices=("frozen", "lora"),
        default=None,
        help="tuning of the anchor ('ours') model (default: the label-aware recipe's)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        help="run only these blocks (Loss, 'Caption mix', Tuning, Initialisation, Kernel)",
    )


class SharedFeatureRanker:
    """Cosine ranking for dual-lite variants whose image tower is the frozen shared one.

    Such variants differ only in their heads (and text tower), so the gallery's image-tower
    features are computed once and each variant only re-projects them.
    """

    note = ""

    def __init__(self, features: Any) -> None:
        self.features = features
        self.embedder: Any = None
        self.spec = ""

    @property
    def card(self) -> Any:
        return self.embedder.card

    def use(self, embedder: Any, name: str) -> SharedFeatureRanker:
        if "image" in embedder.card.extra.get("adapters", ""):
            raise ValueError("SharedFeatureRanker needs the frozen image tower.")
        self.embedder, self.spec = embedder, name
        return self

    def score(self, task: Any, progress: Any = None, stop: Any = None) -> Any:
        """The ranker protocol (medheb_app.eval.rankers) over the precomputed features."""
        import torch

        with torch.inference_mode():
            images = self.embedder.heads.project_image(self.features).numpy()
        return self.embedder.encode_text([str(q.item) for q in task.queries]) @ images.T


def anchor_settings(tune: str | None = None) -> dict[str, Any]:
    """What the "ours" model varies over: OURS plus the recipe's default tuning, init, kernel."""
    # deferred: pandas, safetensors, torch
    from medheb_app.train.label_aware import LabelAwareConfig

    default = LabelAwareConfig()
    return {**OURS, "tune": tune or default.tune, "init": default.init, "kernel": default.kernel}


def variant_key(overrides: dict[str, Any], anchor: dict[str, Any]) -> str:
    """Folder name of a variant: identical settings share one trained checkpoint."""
    merged = {**anchor, **overrides}
    slug = {
        k: str(v).replace(":", "").replace("/", "_").replace("@", "_") for k, v in merged.items()
    }
    return "-".join(f"{k}_{slug[k]}" for k in sorted(slug))


def is_anchor(overrides: dict[str, Any], anchor: dict[str, Any]) -> bool:
    """A row that names a choice the anchor already makes (it is "ours" under another name)."""
    return bool(overrides) and all(anchor.get(k) == v for k, v in overrides.items())


def _trained_before(folder: Path, config: Any) -> bool:
    """A checkpoint in `folder` trained with exactly this config (reused, not retrained)."""
    path = folder / "config.json"
    if not path.is_file():
        return False
    saved = json.loads(path.read_text()).get("training", {})
    return saved == json.loads(json.dumps(config_to_dict(config)))


def run_ablations(args: argparse.Namespace, settings: Settings) -> tuple[str, Any]:
    # deferred: pandas, safetensors, torch
    from medheb_app.eval.cxr_retrieve import evaluate
    from medheb_app.eval.cxr_tables import table4
    from medheb_app.models.dual_lite import DualLiteEmbedder
    from medheb_app.tasks.cxr_retrieve import gallery_from_studies, load_studies
    from medheb_app.train.label_aware import LabelAwareConfig, train_label_aware

    started = time.perf_counter()
    out = Path(args.out)
    studies = load_studies(args.data, settings)
    gallery = gallery_from_studies(studies, args.data, "test")
    shared = None
    anchor = anchor_settings(args.tune)
    chosen = [v for v in VARIANTS if args.only is None or v[0] in args.only]
    trained: dict[str, Any] = {}
    rows, records = [], []
    for block, variant, overrides in chosen:
        if is_anchor(overrides, anchor):
            variant = f"{variant} (ours)"
        key = variant_key(overrides, anchor)
        if key not in trained:
            values = {**anchor, **overrides}
            values.update(data=args.data, seed=args.seed)
            if args.epochs is not None:
                values["epochs"] = args.epochs
            config = LabelAwareConfig(**values)
            folder = out / key
            if not _trained_before(folder, config):
                train_label_aware(config, folder, settings, studies=studies)
            embedder = DualLiteEmbedder.from_checkpoint(folder)
            if shared is None:
                pixels = [s.load_pixels() for s in gallery.studies]
                shared = SharedFeatureRanker(embedder.image_features(pixels))
            report = evaluate(shared.use(embedder, variant), gallery)
            results = json.loads((folder / "config.json").read_text())["results"]
            trained[key] = (report, results, config)
        report, results, config = trained[key]
        report = dataclasses.replace(report, model=variant)
        rows.append((block, variant, report))
        records.append(
            {
                "block": block,
                "variant": variant,
                "checkpoint": str(out / key),
                "config": dataclasses.asdict(config),
                "train_seconds": results.get("seconds"),
                "final_loss": results.get("final_loss"),
                "regimes": report.regimes,
            }
        )
    payload = {
        "data": args.data,
        "gallery": {"split": "test", "n": len(gallery)},
        "rows": records,
        "seconds": round(time.perf_counter() - started, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    text = "\n".join(
        [
            f"Ablations on {args.data} (test split, {len(gallery)} images); P@5 except HNRR@5",
            table4(rows),
            f"{len(trained)} trainings, {payload['seconds']:.0f} s; wrote {out / 'results.json'}",
        ]
    )
    return text, payload
