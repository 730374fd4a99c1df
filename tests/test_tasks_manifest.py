"""Task manifests: a JSONL (and parquet) fixture with PNG images, validated and runnable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from medheb_app.eval.rankers import OracleRanker
from medheb_app.eval.runner import evaluate_task
from medheb_app.evidence.study import Evidence
from medheb_app.tasks.manifest import load_manifest_task, manifest_suite

METADATA = {
    "name": "toy-i2label",
    "family": "I-Lab",
    "form": "2d",
    "split": "held-out-source",
    "anatomy": "chest",
    "source": "toy",
    "qry_inst": "Represent the given image with the following question:",
    "qry_text": "What is the finding?",
}


def write_fixture(folder: Path) -> Path:
    (folder / "images").mkdir(parents=True)
    for index in range(3):
        pixels = (np.full((16, 16), 40 * index + 20)).astype(np.uint8)
        Image.fromarray(pixels).save(folder / "images" / f"q{index}.png")
    rows = [
        {
            "query": {"id": "q0", "image": "images/q0.png"},
            "candidates": [{"id": "edema", "text": "Edema"}, {"id": "none", "text": "No Finding"}],
            "positive": "edema",
        },
        {"query": {"id": "q1", "image": "images/q1.png"}, "candidates": ["edema", "none"],
         "positive": ["none"]},
        # this row ranks only two of the three labels
        {"query": {"id": "q2", "image": "images/q2.png", "text": "frontal view"},
         "candidates": ["none", {"id": "mass", "text": "Mass"}], "positive": "mass"},
    ]  # fmt: skip
    manifest = folder / "toy-i2label.jsonl"
    manifest.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    (folder / "toy-i2label.json").write_text(json.dumps(METADATA))
    return manifest


def test_jsonl_manifest_becomes_a_task(tmp_path: Path) -> None:
    task = load_manifest_task(write_fixture(tmp_path))
    rev = task.metadata.data_revision
    assert task.metadata.instruction.endswith("What is the finding?")
    assert [c.id for c in task.candidates] == [
        f"toy-i2label@{rev}:{c}" for c in ("edema", "mass", "none")
    ]
    q0, q1, q2 = task.queries
    assert isinstance(q0.item, Evidence) and q0.item.image.shape == (16, 16)
    assert q2.item.text == "frontal view" and q2.item.image is not None
    assert q1.positives == (f"toy-i2label@{rev}:none",)
    assert q2.exclude == frozenset({f"toy-i2label@{rev}:edema"})
    run = evaluate_task(task, OracleRanker())
    assert run.scores["hit@1"] == 1.0
    assert all(f"toy-i2label@{rev}:edema" not in r for r in [run.queries[2]["ranked"]])


def test_revision_changes_with_the_image_bytes(tmp_path: Path) -> None:
    manifest = write_fixture(tmp_path)
    before = load_manifest_task(manifest).metadata.data_revision
    Image.fromarray(np.zeros((16, 16), np.uint8)).save(tmp_path / "images" / "q2.png")
    assert load_manifest_task(manifest).metadata.data_revision != before


def test_parquet_manifest_with_json_cells(tmp_path: Path) -> None:
    write_fixture(tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "toy-i2label.jsonl").read_text().splitlines()]
    frame = pd.DataFrame(
        {key: [json.dumps(row[key]) for row in rows] for key in ("query", "candidates")}
    )
    # a plain id stays a plain string cell; a list of ids is a JSON cell
    frame["positive"] = [
        r["positive"] if isinstance(r["positive"], str) else json.dumps(r["positive"]) for r in rows
    ]
    frame.to_parquet(tmp_path / "toy-i2label.parquet")
    (tmp_path / "toy-i2label.jsonl").unlink()
    task = load_manifest_task(tmp_path / "toy-i2label.parquet")
    assert len(task.queries) == 3 and len(task.candidates) == 3
    suite = manifest_suite(tmp_path)
    assert suite.names() == ["toy-i2label"]


def test_bad_manifests_fail_with_a_clear_message(tmp_path: Path) -> None:
    manifest = write_fixture(tmp_path)
    (tmp_path / "toy-i2label.json").write_text(json.dumps({**METADATA, "family": "X"}))
    with pytest.raises(ValueError, match="family"):
        load_manifest_task(manifest)
    (tmp_path / "toy-i2label.json").write_text(json.dumps(METADATA))
    manifest.write_text(json.dumps({"query": {"id": "q"}, "candidates": ["a"]}) + "\n")
    with pytest.raises(ValueError, match="row 1"):
        load_manifest_task(manifest)
    manifest.write_text(
        json.dumps({"query": {"id": "q", "text": "x"}, "candidates": ["a"], "positive": "a"}) + "\n"
    )
    with pytest.raises(ValueError, match="never defined"):
        load_manifest_task(manifest)
    manifest.write_text(
        json.dumps(
            {
                "query": {"id": "q", "image": "images/nope.png"},
                "candidates": [{"id": "a", "text": "A"}],
                "positive": "a",
            }
        )
        + "\n"
    )
    with pytest.raises(ValueError, match="not found"):
        load_manifest_task(manifest)
