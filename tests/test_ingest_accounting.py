"""Every file a source sees ends as an item or as a failed.jsonl line with a reason (issue 23.1).

Fixtures are real formats: DICOM films written with pydicom (with and without PixelData, one
instance exported twice), PNG / JPEG folders with colliding names, a labels CSV with rows
pointing nowhere, a JSONL manifest with missing files and unlisted images, a text file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from medheb_app.cli import main
from medheb_app.evidence.study import Study
from medheb_app.index.build import FAILED_FILE, BuildError, build_from_source, build_index
from medheb_app.index.catalog import load_index
from medheb_app.index.provenance import pseudonym, pseudonym_key
from medheb_app.index.sources import SourceError, in_memory, load_source
from medheb_app.models.registry import load_embedder
from tests.ingest_fixtures import film, image

RANDOM = "8edde42cb6a477b6"  # the random model's fingerprint


def failures(report_dir: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (Path(report_dir) / FAILED_FILE).open()]


def test_colliding_names_stay_distinct_and_every_other_file_is_listed(
    settings, tmp_path, capsys
) -> None:
    root = tmp_path / "pngs"
    for seed, name in enumerate(("a/b.png", "a-b.png", "c.png", "c.jpg", "d/e.jpeg")):
        image(root / name, seed=seed)
    (root / "notes.txt").write_text("reading list")
    rows = [{"path": p, "Emphysema": 1, "Fibrosis": 0} for p in ("a/b.png", "a-b.png", "c.png")]
    rows += [{"path": "gone.png", "Emphysema": 0, "Fibrosis": 1}, {"path": "x/gone.jpg"}]
    pd.DataFrame(rows).to_csv(root / "labels.csv", index=False)
    code = main(["index", "build", "--source", f"folder:{root}", "--model", "random",
                 "--name", "pngs"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "Not indexed: 1 not an image, 2 missing file" in out
    loaded = load_index("pngs", RANDOM, settings)
    key = pseudonym_key(settings)
    expected = {pseudonym(key, "folder", n) for n in ("a/b.png", "a-b.png", "c.png", "c.jpg")}
    assert expected | {pseudonym(key, "folder", "d/e.jpeg")} == set(loaded.index.ids)
    assert len(loaded.index.ids) == 5  # five files, five items: nothing merged
    listed = sorted((f["item"], f["reason"]) for f in failures(str(loaded.directory)))
    assert listed == [
        ("gone.png", "missing file"),
        ("notes.txt", "not an image"),
        ("x/gone.jpg", "missing file"),
    ]
    # the labels CSV is the index's vocabulary; an image without a row is indexed unlabelled
    assert loaded.info["vocabulary"]["names"] == ["Emphysema", "Fibrosis"]
    assert loaded.item(pseudonym(key, "folder", "c.jpg"))["findings"] == {}
    assert loaded.item(pseudonym(key, "folder", "a-b.png"))["findings"] == {
        "Emphysema": 1,
        "Fibrosis": 0,
    }


def test_dicom_odd_cases_are_counted_and_a_twice_exported_instance_is_dropped_once(
    settings, tmp_path
) -> None:
    root = tmp_path / "pacs"
    first = film(root / "s1" / "IM0001.dcm", seed=1)
    film(root / "s2" / "IM0001.dcm", seed=2)
    film(root / "s3" / "IM0001.dcm", seed=3)
    (root / "export2").mkdir()
    shutil.copy(root / "s1" / "IM0001.dcm", root / "export2" / "copy.dcm")  # exported twice
    film(root / "sr" / "report.dcm", with_pixels=False)  # a structured report: no pixels
    (root / "DICOMDIR.txt").write_text("index of the CD")
    truncated = (root / "s1" / "IM0001.dcm").read_bytes()[:300]
    (root / "broken.dcm").write_bytes(truncated)
    report = build_from_source(f"dicom:{root}", "random", "pacs", settings)
    assert report.n_items == 3
    assert report.failed_by_reason == {
        "not an image": 1,
        "no pixel data": 1,
        "duplicate instance": 1,
        "unreadable": 1,
    }
    loaded = load_index("pacs", RANDOM, settings)
    # the instance exported twice is one 2D film, not a 2-slice "3d" study
    assert sorted(row["form"] for row in loaded.items.values()) == ["2d", "2d", "2d"]
    listed = {f["item"]: f for f in failures(report.directory)}
    # the first in path order is kept, the later copy listed with the file it repeats
    assert listed["s1/IM0001.dcm"]["reason"] == "duplicate instance"
    assert "export2/copy.dcm" in listed["s1/IM0001.dcm"]["detail"]
    assert listed["sr/report.dcm"]["reason"] == "no pixel data"
    assert listed["DICOMDIR.txt"]["reason"] == "not an image"
    assert listed["broken.dcm"]["reason"] == "unreadable"
    key = pseudonym_key(settings)
    assert pseudonym(key, "dicom", str(first.SeriesInstanceUID)) in loaded.items


def test_manifest_rows_pointing_nowhere_and_images_without_a_row(settings, tmp_path) -> None:
    images = tmp_path / "export" / "images"
    for number in range(5):
        image(images / f"img{number}.png", seed=number)
    rows = [{"id": f"case-{n}", "image": f"images/img{n}.png", "findings": {"Mass": 1}}
            for n in range(3)]  # fmt: skip
    rows += [{"id": "case-8", "image": "images/img8.png"}, {"id": "case-9", "image": "img9.png"}]
    manifest = tmp_path / "export" / "items.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = build_from_source(f"manifest:{manifest}", "random", "man", settings)
    assert report.n_items == 3
    assert report.failed_by_reason == {"missing file": 2, "no manifest row": 2}
    listed = sorted((f["item"], f["reason"]) for f in failures(report.directory))
    assert listed == [
        ("images/img3.png", "no manifest row"),
        ("images/img4.png", "no manifest row"),
        ("images/img8.png", "missing file"),
        ("img9.png", "missing file"),
    ]


def test_an_id_collision_is_an_error_not_a_merge(settings, tmp_path) -> None:
    one, two = image(tmp_path / "one.png", seed=1), image(tmp_path / "two.png", seed=2)
    studies = [Study(id="x", form="2d", path=str(one)), Study(id="x", form="2d", path=str(two))]
    with pytest.raises(BuildError, match="share the id 'x'; nothing was merged"):
        build_index(in_memory(studies), load_embedder("random", settings), "clash", settings)
    rows = [{"id": "x", "image": "one.png"}, {"id": "x", "image": "two.png"}]
    manifest = tmp_path / "items.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SourceError, match="id 'x' is already used"):
        load_source(f"manifest:{manifest}", settings)
    # the same item listed twice (a task manifest's shared candidates) is one item
    same = [{"id": "x", "image": "one.png"}, {"id": "x", "image": "one.png"}]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in same))
    assert len(load_source(f"manifest:{manifest}", settings).studies) == 1
