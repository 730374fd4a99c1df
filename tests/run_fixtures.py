"""A two-model benchmark run folder in the runner's DESIGN.md format, for the study tests.

Model and task names end in "-secret" so blinding tests can search the page for them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

MODELS = ("model-alpha-secret", "model-beta-secret")
TASK = "stratum-task-secret"


def write_run(run_dir: Path, with_images: bool = False) -> None:
    """DIR/<model>/<task>.json for both models: 4 queries over 6 candidates, shifted rankings.

    with_images adds a PNG per candidate (under DIR/media) beside its report text.
    """
    candidates: dict[str, dict[str, str]] = {}
    if with_images:
        (run_dir / "media").mkdir(parents=True)
    for i in range(6):
        candidates[f"c{i}"] = {"text": f"candidate report {i}"}
        if with_images:
            path = run_dir / "media" / f"c{i}.png"
            Image.fromarray(np.full((64, 64), 40 * i, dtype=np.uint8)).save(path)
            candidates[f"c{i}"]["image"] = str(path)
    for offset, model in enumerate(MODELS):
        queries = [
            {
                "id": f"q{q}",
                "query": f"query text {q}",
                "ranked": [f"c{(q + offset + r) % 6}" for r in range(6)],
                "positives": [f"c{q}"],
            }
            for q in range(4)
        ]
        payload = {
            "metadata": {"name": TASK, "family": "T-T", "split": "ID"},
            "queries": queries,
            "candidates": candidates,
        }
        (run_dir / model).mkdir(parents=True)
        (run_dir / model / f"{TASK}.json").write_text(json.dumps(payload))
