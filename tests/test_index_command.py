"""`index build|list|info|remove` over real layouts: NIH sample, MIMIC-CXR-JPG, DICOM, PNGs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pydicom
import pytest
from PIL import Image

from medheb_app.cli import main
from medheb_app.evidence.findings import CHEXPERT_14, NIH_14
from medheb_app.index.build import FAILED_FILE, BuildError, build_from_source
from medheb_app.index.catalog import list_indices, load_index
from medheb_app.index.provenance import pseudonym, pseudonym_key
from medheb_app.index.sources import SourceError, parse_source
from medheb_app.search import SearchError, search
from tests.conftest import NIH_DIR, require_shared
from tests.test_readers_formats import _write_series
from tests.test_sources_dicom_folder import real
from tests.test_sources_mimic import build_mimic

JSON_KEYS = {
    "name", "n_items", "embedded", "reused", "failed", "seconds", "engine", "device", "kind",
    "vocabulary",
}  # fmt: skip


def nih_dir() -> Path:
    """The shared NIH sample (../shared/data, or MEDHEB_SHARED_DATA as the app reads it)."""
    shared = os.environ.get("MEDHEB_SHARED_DATA")
    return Path(shared) / NIH_DIR.name if shared else NIH_DIR


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    payload = json.loads(captured.out) if code == 0 and "--json" in argv else {}
    return code, payload, captured.err


def png_folder(root: Path, n: int = 12, corrupt: int = 1, labels: bool = True) -> Path:
    """n greyscale PNGs in two sub-folders, `corrupt` damaged ones, and a labels.csv."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        relative = f"{'a' if i % 2 else 'b'}/img{i:03d}.png"
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (24, 20), dtype=np.uint8)).save(root / relative)
        rows.append({"path": relative, "Nodule": i % 3 == 0 or None, "Scar": 0 if i % 2 else 1})
    for j in range(corrupt):
        bad = root / "b" / f"broken{j}.png"
        bad.parent.mkdir(parents=True, exist_ok=True)
        bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png")
        rows.append({"path": f"b/broken{j}.png", "Nodule": 1, "Scar": 0})
    if labels:
        frame = pd.DataFrame(rows)
        frame["Nodule"] = frame["Nodule"].map(lambda v: 1 if v is True or v == 1 else None)
        frame.to_csv(root / "labels.csv", index=False)
    return root


def test_source_specs_parse_and_bad_ones_say_what_is_expected(tmp_path: Path) -> None:
    assert parse_source("phantom").kind == "phantom" and parse_source("phantom:40").n == 40
    spec = parse_source(f"folder:{tmp_path},labels={tmp_path}/l.csv")
    assert spec.path == tmp_path and spec.labels == tmp_path / "l.csv"
    assert parse_source("mimic:/data/mimic").path == Path("/data/mimic")
    for bad, message in (
        ("pacs:/x", "Unknown source"),
        ("nih:", "needs a path"),
        ("phantom:many", "number of studies"),
        ("phantom:3", "at least 10"),
        ("nih:/x,labels=/y.csv", "labels= applies to dicom"),
    ):
        with pytest.raises(SourceError, match=message):
            parse_source(bad)


def test_nih_sample_builds_with_its_own_vocabulary_and_resumes(settings, capsys) -> None:
    nih = require_shared(nih_dir())
    argv = ["index", "build", "--source", f"nih:{nih}", "--model", "random", "--name", "nih"]
    code, payload, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    assert set(payload) >= JSON_KEYS
    assert payload["n_items"] == 1000 and payload["embedded"] == 1000 and payload["failed"] == 0
    assert payload["engine"] == "local" and payload["device"] == "cpu"
    assert payload["kind"] == "exact"
    assert payload["vocabulary"] == {
        "names": list(NIH_14), "scheme": "positive-only", "source": "nih-cxr14",
    }  # fmt: skip
    assert "items/s" in err and "ETA" in err
    again = run_cli(capsys, *argv, "--replace", "--json")[1]  # a rebuild must say so
    assert again["reused"] == 1000 and again["embedded"] == 0
    loaded = load_index("nih", "8edde42cb6a477b6", settings)
    emphysema = [r for r in loaded.items.values() if r["findings"].get("Emphysema") == 1]
    assert emphysema and all(set(r["findings"]) == set(NIH_14) for r in loaded.items.values())
    parsed = search(
        query_text="emphysema and no effusion", model_spec="random", index="nih", settings=settings
    )
    assert parsed.positive == ["Emphysema"] and parsed.negative == ["Effusion"]
    assert parsed.unknown_terms == []
    response = search(
        query_text="cardiomegaly and no atelectasis", model_spec="random", index="nih",
        settings=settings, setting="strict",
    )  # fmt: skip
    assert response.positive == ["Cardiomegaly"] and response.negative == ["Atelectasis"]
    assert any("positive-only" in w and "confirmed negative" in w for w in response.warnings)
    assert all(hit.satisfies is False for hit in response.results)  # strict: no confirmed 0s
    code, listing, _ = run_cli(capsys, "index", "list", "--json")
    assert [entry["name"] for entry in listing] == ["nih"]
    assert listing[0]["vocabulary"]["scheme"] == "positive-only"
    code, info, _ = run_cli(capsys, "index", "info", "nih", "--json")
    assert info["builds"][0]["corpus"]["kind"] == "nih" and info["builds"][0]["failures"] == []
    code, removed, _ = run_cli(capsys, "index", "remove", "nih", "--json")
    assert code == 0 and removed["removed_models"] == ["random"]
    assert list_indices(settings) == []
    assert main(["index", "info", "nih"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_mimic_fixture_indexes_with_chexpert_vocabulary(settings, tmp_path) -> None:
    root = tmp_path / "mimic-cxr-jpg"
    root.mkdir()
    build_mimic(root)
    report = build_from_source(f"mimic:{root}", "random", "mimic", settings)
    assert report.n_items == 2  # the frontal images on disk (PA + AP)
    assert report.vocabulary["names"] == list(CHEXPERT_14)
    assert report.vocabulary["scheme"] == "coded"
    loaded = load_index("mimic", "8edde42cb6a477b6", settings)
    effusion = loaded.item("mimic-2a2277a9-b0ded155")["findings"]
    assert effusion["Pleural Effusion"] == 1 and effusion["Pneumothorax"] == 0
    assert effusion["Edema"] == -1
    response = search(
        query_text="support devices and no pneumothorax", model_spec="random", index="mimic",
        settings=settings, setting="strict",
    )  # fmt: skip
    assert response.positive == ["Support Devices"] and response.negative == ["Pneumothorax"]
    assert not any("positive-only" in w for w in response.warnings)


def test_png_folder_counts_a_corrupt_file_as_failed_and_lists_why(settings, tmp_path) -> None:
    root = png_folder(tmp_path / "pngs", n=12, corrupt=1)
    report = build_from_source(f"folder:{root}", "random", "pngs", settings, shard_size=5)
    assert report.n_items == 12 and report.failed == 1 and report.embedded == 12
    assert report.vocabulary == {"names": ["Nodule", "Scar"], "scheme": "coded", "source": "folder"}
    failures = [json.loads(line) for line in (Path(report.directory) / FAILED_FILE).open()]
    assert len(failures) == 1 and failures[0]["item"] == "b/broken0.png"
    assert failures[0]["reason"] == "unreadable" and "broken0.png" in failures[0]["detail"]
    loaded = load_index("pngs", "8edde42cb6a477b6", settings)
    key = pseudonym_key(settings)
    assert loaded.item(pseudonym(key, "folder", "a/img001.png"))["findings"] == {
        "Nodule": None,
        "Scar": 0,
    }
    first = pseudonym(key, "folder", "b/img000.png")
    assert loaded.item(first)["findings"] == {"Nodule": 1, "Scar": 1}
    # no split in a lab's folder: logic-aware probes cross-fit instead of failing
    assert loaded.item(first)["split"] is None


def test_nothing_readable_fails_the_command_with_one_line(settings, tmp_path, capsys) -> None:
    root = tmp_path / "bad"
    png_folder(root, n=0, corrupt=3, labels=False)
    with pytest.raises(BuildError, match="Nothing could be indexed"):
        build_from_source(f"folder:{root}", "random", "bad", settings)
    code = main(["index", "build", "--source", f"folder:{root}", "--model", "random",
                 "--name", "bad"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: Nothing could be indexed")
    assert "Traceback" not in "\n".join(err) and list_indices(settings) == []


def test_unlabelled_folder_gets_similarity_and_says_why_not_logic(settings, tmp_path) -> None:
    root = png_folder(tmp_path / "plain", n=6, corrupt=0, labels=False)
    report = build_from_source(f"folder:{root}", "random", "plain", settings)
    assert report.vocabulary["scheme"] == "none" and report.vocabulary["names"] == []
    # issue 23 item 5: logic ranking of an unlabelled index is refused in a sentence, and
    # similarity (asked for, or picked by auto for a plain description) answers unchecked
    with pytest.raises(SearchError, match="offers similarity search only"):
        search(
            query_text="pleural effusion", model_spec="random", index="plain",
            settings=settings, ranking="logic",
        )  # fmt: skip
    response = search(
        query_text="pleural effusion", model_spec="random", index="plain", settings=settings
    )
    assert response.ranking == "similarity" and len(response.results) == 6
    assert any("offers similarity search only" in w for w in response.warnings)
    assert all(hit.satisfies is None for hit in response.results)


def test_dicom_folder_series_with_labels_and_a_damaged_series(settings, tmp_path) -> None:
    root = tmp_path / "pacs"
    _write_series(root / "patient_a" / "series_1")
    (root / "misc").mkdir()
    for name in ("CT_small.dcm", "MR_truncated.dcm"):
        shutil.copy(real(name), root / "misc" / name)
    ct_uid = str(pydicom.dcmread(real("CT_small.dcm"), stop_before_pixels=True).SeriesInstanceUID)
    pd.DataFrame([{"SeriesInstanceUID": ct_uid, "split": "train", "Hemorrhage": 1}]).to_csv(
        tmp_path / "labels.csv", index=False
    )
    report = build_from_source(
        f"dicom:{root},labels={tmp_path / 'labels.csv'}", "random", "pacs", settings
    )
    # two series; the truncated one fails, and the series' README.txt is counted too
    assert report.n_items == 2 and report.failed == 2
    assert report.failed_by_reason == {"not an image": 1, "unreadable": 1}
    assert report.vocabulary["names"] == ["Hemorrhage"]
    loaded = load_index("pacs", "8edde42cb6a477b6", settings)
    labelled = [row for row in loaded.items.values() if row["findings"]]
    assert len(labelled) == 1 and labelled[0]["findings"] == {"Hemorrhage": 1}
    assert sorted(row["form"] for row in loaded.items.values()) == ["2d", "3d"]


def test_medmnist_and_manifest_sources(settings, tmp_path) -> None:
    rng = np.random.default_rng(1)
    arrays = {}
    for split, count in (("train", 6), ("val", 2), ("test", 3)):
        arrays[f"{split}_images"] = rng.integers(0, 255, (count, 28, 28), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 2, (count, 1))
    np.savez(tmp_path / "pneumoniamnist.npz", **arrays)
    report = build_from_source(
        f"medmnist:{tmp_path / 'pneumoniamnist.npz'}", "random", "pm", settings
    )
    assert report.n_items == 11 and report.vocabulary["names"] == ["normal", "pneumonia"]
    Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(tmp_path / "x.png")
    rows = [
        {"id": "a", "image": "x.png", "findings": {"Mass": 1}, "split": "train"},
        {"id": "b", "text": "small nodule in the left upper lobe", "findings": {"Mass": 0}},
        {"id": "c", "image": "missing.png"},
    ]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = build_from_source(f"manifest:{tmp_path / 'items.jsonl'}", "random", "man", settings)
    assert report.n_items == 2 and report.failed == 1
    assert report.vocabulary == {"names": ["Mass"], "scheme": "coded", "source": "manifest:items"}


def test_admin_job_builds_any_source_with_rate_and_eta(settings, tmp_path) -> None:
    import threading

    from medheb_app.services.admin_jobs import index_job

    root = png_folder(tmp_path / "pngs", n=8, corrupt=0)
    messages: list[str] = []
    result = index_job(settings)(
        {"name": "adm", "model": "random", "source": f"folder:{root}"},
        lambda fraction, message: messages.append(message),
        lambda line: None,
        threading.Event(),
    )
    assert result["count"] == 8 and result["n_items"] == 8
    assert any("items/s" in m and "ETA" in m for m in messages)


def test_index_names_cannot_escape_the_index_folder(settings, tmp_path, capsys) -> None:
    victim = settings.data_dir / "precious"
    victim.mkdir(parents=True)
    for argv in (
        ["index", "remove", "../precious"],
        ["index", "info", "../precious"],
        ["index", "build", "--source", "phantom:10", "--model", "random", "--name", "../x"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "error:" in err and "Traceback" not in err
    assert victim.is_dir()
