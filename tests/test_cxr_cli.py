"""`python -m medheb_app cxr-retrieve eval` on an NIH-layout fixture and on the real NIH 1,000."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from medheb_app.cli import main
from medheb_app.eval.cxr_tables import p5_by_finding
from tests.conftest import NIH_DIR, require_shared

NIH_COLUMNS = [
    "Image Index",
    "split",
    "Finding Labels",
    "Follow-up #",
    "Patient ID",
    "Patient Age",
    "Patient Gender",
    "View Position",
    "OriginalWidth",
    "OriginalHeight",
    "PixelSpacingX",
    "PixelSpacingY",
]
LABELS = ["Effusion", "Atelectasis|Effusion", "Atelectasis", "No Finding", "Cardiomegaly|Edema"]


def nih_fixture(root: Path, n: int = 60) -> Path:
    """A folder in the shared NIH layout: labels.csv, bboxes.csv and images/*.png."""
    (root / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    with open(root / "labels.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(NIH_COLUMNS)
        for i in range(n):
            name = f"{i:08d}_000.png"
            pixels = (rng.random((16, 16)) * 255).astype(np.uint8)
            Image.fromarray(pixels).convert("RGB").save(root / "images" / name)
            writer.writerow(
                [
                    name,
                    "train",
                    LABELS[i % len(LABELS)],
                    0,
                    i,
                    50,
                    "F",
                    "PA",
                    1024,
                    1024,
                    0.14,
                    0.14,
                ]
            )
    (root / "bboxes.csv").write_text("Image Index,Finding Label,Bbox [x,y,w,h]\n")
    return root


def test_eval_json_contract_and_tables(tmp_path: Path, settings, capsys) -> None:
    data = nih_fixture(tmp_path / "nih")
    out = tmp_path / "run.json"
    code = main(
        ["cxr-retrieve", "eval", "--model", "oracle", "--data", f"nih:{data}", "--out", str(out)]
    )
    human = capsys.readouterr().out
    assert code == 0
    assert "Table 2 layout" in human and "| oracle |" in human
    assert "Fracture" in human and "No confirmed negatives" in human
    payload = json.loads(out.read_text())
    for kind in ("single", "pair", "negation"):
        assert {"P@1", "P@3", "P@5", "R@3", "R@5"} <= set(payload["regimes"][kind])
    assert {"HNRR@1", "HNRR@3", "HNRR@5"} <= set(payload["regimes"]["negation"])
    assert len(payload["queries"]) == 145
    query = payload["queries"][0]
    assert {"id", "kind", "text", "positives", "negatives", "top_k"} <= set(query)
    assert {"id", "findings"} <= set(query["top_k"][0])
    # the oracle ranks by true labels: every query that has a relevant image gets it at rank 1
    for record in payload["queries"]:
        if record["n_relevant_main"] > 0:
            assert record["metrics_main"]["P@1"] == 1.0, record["text"]
    assert payload["settings"]["strict"]["negation"]["P@1"] == 0.0  # NIH: positive-only
    assert "Per finding A (beyond the paper)" in human
    run = SimpleNamespace(queries=payload["queries"])
    single, negation = p5_by_finding(run, "single"), p5_by_finding(run, "negation")
    assert len(single) == len(negation) == 10
    for name in single:
        assert f"| {name} | {single[name]:.1f} / {negation[name]:.1f} |" in human


def test_eval_json_flag_compares_models_in_one_run(tmp_path: Path, settings, capsys) -> None:
    data = nih_fixture(tmp_path / "nih")
    args = ["cxr-retrieve", "eval", "--data", f"nih:{data}", "--out", str(tmp_path / "o.json")]
    code = main([*args, "--model", "random", "--model", "logic:oracle", "--paraphrase", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0
    runs = {run["model"]: run for run in payload["runs"]}
    assert set(runs) == {"random", "logic:oracle"}
    assert runs["logic:oracle"]["paraphrase"] is True
    assert runs["logic:oracle"]["queries"][-1]["text"].startswith("an image with")
    logic, chance = runs["logic:oracle"]["regimes"], runs["random"]["regimes"]
    assert logic["negation"]["P@1"] > chance["negation"]["P@1"]


def test_bad_source_is_one_clear_error(tmp_path: Path, settings, capsys) -> None:
    code = main(
        ["cxr-retrieve", "eval", "--model", "oracle", "--data", "chexpert", "--out", "x.json"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Source chexpert: needs a path") and err.count("\n") == 1
    assert "The benchmark reads 'phantom', 'nih:PATH' or 'mimic:PATH'." in err


def test_real_nih_oracle(tmp_path: Path, settings, capsys) -> None:
    data = require_shared(NIH_DIR)
    out = tmp_path / "nih.json"
    args = ["cxr-retrieve", "eval", "--model", "oracle", "--data", f"nih:{data}", "--out"]
    assert main([*args, str(out), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["n_gallery"] > 100
    assert any("Fracture" in note for note in payload["notes"])
    single = payload["without_relevant"]["main"]["single"]
    assert single >= 1  # at least Fracture has no relevant image
    assert payload["regimes"]["single"]["P@1"] == pytest.approx(100.0 * (10 - single) / 10)
