"""A job the server starts reads no file outside its source roots; the CLI reads any path.

Adversarial pass at b4d1120 (B3, B4, B5): a manifest under a root whose rows named files
outside it (absolute and `../` paths) was indexed; a folder under a root read symbolic-link
files that point outside it; and a manifest index's metadata.jsonl (0644) held each file's
absolute path, a patient's name in it. Real files, real JSONL manifests, real symbolic links.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from medheb_app.cli import main
from medheb_app.index.catalog import load_index
from medheb_app.index.sources import OUTSIDE_ROOTS, SourceError, load_source
from medheb_app.services import create_services
from medheb_app.services.admin_jobs import index_job
from medheb_app.ui import admin_tab
from tests.ingest_fixtures import PATIENT_FOLDER, film, image

RANDOM = "8edde42cb6a477b6"  # the random model's fingerprint


def write_manifest(path: Path, rows: list[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def archive(tmp_path):
    """A root `pacs` (two films of its own) and a patient's folder outside every root."""
    root, outside = tmp_path / "pacs", tmp_path / "home" / PATIENT_FOLDER
    inside = [image(root / "ward" / f"in{n}.png", seed=n) for n in range(2)]
    secret = [image(outside / f"out{n}.png", seed=10 + n) for n in range(2)]
    return SimpleNamespace(root=root, outside=outside, inside=inside, secret=secret)


@pytest.fixture
def rooted(settings, archive):
    """The server's services with `pacs` as its only source root."""
    services = create_services(
        replace(settings, admin_password="x", source_roots=(("pacs", archive.root),)),
        start_bootstrap=False,
    )
    yield services
    services.jobs.shutdown(wait=False)


def failed_lines(settings, name: str) -> list[dict[str, str]]:
    text = next(settings.index_dir.glob(f"{name}/*/failed.jsonl")).read_text()
    return [json.loads(line) for line in text.splitlines()]


def everything_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def run_job(rooted, source: str, name: str):
    job_id = rooted.admin_jobs.start("index-build", {"name": name, "model": "random",
                                                     "source": source})  # fmt: skip
    return rooted.jobs.wait(job_id, timeout=120), rooted.jobs.logs(job_id)


def test_a_server_job_refuses_a_manifest_naming_files_outside_the_roots(rooted, archive):
    (archive.root / "ward" / "link.png").symlink_to(archive.secret[1])
    rows = {
        "absolute": {"id": "abs", "image": str(archive.secret[0])},
        "up": {"id": "up", "image": f"../../home/{PATIENT_FOLDER}/out1.png"},
        "link": {"id": "link", "image": "link.png"},  # a link under the root leading out
    }
    for case, row in rows.items():
        manifest = write_manifest(
            archive.root / "ward" / f"{case}.jsonl", [{"id": "in0", "image": "in0.png"}, row]
        )
        with pytest.raises(SourceError) as refused:
            rooted.admin_jobs.start(
                "index-build", {"name": "m", "model": "random", "source": f"manifest:{manifest}"}
            )
        said = str(refused.value)
        assert "1 of the 2 files this manifest names lie outside the server's source roots" in said
        assert "(pacs, shared;" in said and "nothing was queued" in said
        assert str(archive.root.parent) not in said and PATIENT_FOLDER not in said
        params = {"name": "m", "model": "random", "source": f"manifest:{manifest}"}
        job_id, note = admin_tab.start_job(rooted, True, "index-build", params)
        assert job_id is None and "names lie outside the server" in note
    assert rooted.jobs.history() == []  # nothing queued
    clean = write_manifest(
        archive.root / "ward" / "clean.jsonl", [{"id": "in0", "image": "in0.png"}]
    )
    state, _ = run_job(rooted, f"manifest:{clean}", "clean")
    assert state.status == "done" and state.result["count"] == 1


def test_a_server_job_reads_no_row_of_a_manifest_that_changed_after_it_was_queued(
    settings, archive
):
    """The rows are checked again as the job reads them (the file may be rewritten between
    the check and the run): rows outside are failed lines named by id, files unread, and no
    folder outside is listed for images without a row."""
    roots = replace(settings, source_roots=(("pacs", archive.root),))
    manifest = write_manifest(
        archive.root / "ward" / "manifest.jsonl",
        [
            {"id": "in0", "image": "in0.png"},
            {"id": "in1", "image": str(archive.inside[1])},  # absolute, under the root: read
            {"id": "abs", "image": str(archive.secret[0])},
            {"id": "up", "image": f"../../home/{PATIENT_FOLDER}/out1.png"},
        ],
    )
    log: list[str] = []
    result = index_job(roots, roots_only=True)(
        {"name": "changed", "model": "random", "source": f"manifest:{manifest}"},
        lambda fraction, message: None,
        log.append,
        threading.Event(),
    )
    assert result["count"] == 2 and result["failed_by_reason"] == {OUTSIDE_ROOTS: 2}
    assert f"not indexed: 2 {OUTSIDE_ROOTS}" in log
    failed = failed_lines(settings, "changed")
    assert sorted(f["item"] for f in failed) == ["abs", "up"]
    assert all(f["reason"] == OUTSIDE_ROOTS for f in failed)
    assert PATIENT_FOLDER not in json.dumps(failed)  # out0 / out1 were never listed
    assert set(load_index("changed", RANDOM, settings).items) == {"in0", "in1"}


def test_a_server_job_skips_symbolic_link_files_that_lead_out_of_the_roots(
    settings, rooted, archive
):
    links = archive.root / "links"
    links.mkdir()
    for number, target in enumerate(archive.secret):
        (links / f"l{number}.png").symlink_to(target)
    (links / "kept.png").symlink_to(archive.inside[0])  # a link that stays under the root is read
    image(links / "own.png", seed=5)
    (links / "labels.csv").write_text("path,Effusion\nl0.png,1\nown.png,0\n")
    state, log = run_job(rooted, f"folder:{links}", "links")
    assert state.status == "done", state.error
    assert state.result["count"] == 2 and state.result["failed_by_reason"] == {OUTSIDE_ROOTS: 2}
    assert f"not indexed: 2 {OUTSIDE_ROOTS}" in log
    failed = failed_lines(settings, "links")
    assert [(f["item"], f["reason"]) for f in failed] == [
        ("l0.png", OUTSIDE_ROOTS),  # its labels row is not also "missing file"
        ("l1.png", OUTSIDE_ROOTS),
    ]
    said = json.dumps(failed) + state.error + "\n".join(log)
    assert PATIENT_FOLDER not in said and str(archive.outside) not in said
    loaded = load_index("links", RANDOM, settings)
    shown = sorted(Path(loaded.item(item)["path"]).resolve() for item in loaded.items)
    assert shown == sorted([archive.inside[0].resolve(), (links / "own.png").resolve()])


def test_a_server_job_reads_no_dicom_header_or_labels_csv_behind_a_link_out(
    settings, rooted, archive, tmp_path
):
    series = archive.root / "dicom"
    film(series / "IM0.dcm", seed=0)
    theirs = film(tmp_path / "home" / PATIENT_FOLDER / "IM1.dcm", seed=1)
    (series / "IM1.dcm").symlink_to(tmp_path / "home" / PATIENT_FOLDER / "IM1.dcm")
    served = replace(settings, source_roots=(("pacs", archive.root),))
    loaded = load_source(f"dicom:{series}", served, roots_only=True)
    assert len(loaded.studies) == 1 and [(f["item"], f["reason"]) for f in loaded.failed] == [
        ("IM1.dcm", OUTSIDE_ROOTS)
    ]
    assert all(
        str(theirs.SeriesInstanceUID) not in json.dumps(r) for r in loaded.references.values()
    )
    assert len(load_source(f"dicom:{series}", served).studies) == 2  # the CLI reads both
    labels = tmp_path / "home" / "labels.csv"
    labels.write_text("path,Effusion\nin0.png,1\n")
    (archive.root / "ward" / "labels.csv").symlink_to(labels)
    with pytest.raises(SourceError, match="only under its source roots"):  # refused up front
        rooted.admin_jobs.start(
            "index-build",
            {"name": "w", "model": "random", "source": f"folder:{archive.root / 'ward'}"},
        )
    with pytest.raises(SourceError, match="labels CSV of this source lies outside"):  # at run
        load_source(f"folder:{archive.root / 'ward'}", served, roots_only=True)
    assert load_source(f"folder:{archive.root / 'ward'}", served).vocabulary.names == ("Effusion",)


def test_the_cli_still_builds_the_same_sources_from_anywhere(settings, archive, capsys):
    (archive.root / "links").mkdir()
    (archive.root / "links" / "l0.png").symlink_to(archive.secret[0])
    image(archive.root / "links" / "own.png")
    manifest = write_manifest(
        archive.root / "ward" / "manifest.jsonl",
        [
            {"id": "in0", "image": "in0.png"},
            {"id": "abs", "image": str(archive.secret[0])},
            {"id": "up", "image": f"../../home/{PATIENT_FOLDER}/out1.png"},
        ],
    )
    for name, source, count, failed in (
        ("m", f"manifest:{manifest}", 3, {"no manifest row": 1}),  # in1.png, beside in0.png
        ("l", f"folder:{archive.root}/links", 2, {}),
    ):
        code = main(["index", "build", "--source", source, "--model", "random", "--name", name,
                     "--json"])  # fmt: skip
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        assert report["n_items"] == count and report["failed_by_reason"] == failed
    loaded = load_index("m", RANDOM, settings)
    assert Path(loaded.item("up")["path"]).resolve() == archive.secret[1].resolve()  # root/../..


def test_a_manifest_index_names_no_server_path_in_its_folder(settings, rooted, archive):
    """B4: metadata.jsonl kept each file's absolute path; now the server's source references
    do, as for folder and DICOM indices, and the page still finds each hit's image."""
    folder = archive.root / PATIENT_FOLDER
    films = [image(folder / f"film{n}.png", seed=20 + n) for n in range(2)]
    manifest = write_manifest(
        folder / "manifest.jsonl",
        [
            {"id": "f0", "image": "film0.png", "findings": {"Effusion": 1}},
            {"id": "f1", "image": str(films[1]), "findings": {"Effusion": 0}},
            {"id": "note", "text": "no acute findings"},
        ],
    )
    assert main(["index", "build", "--source", f"manifest:{manifest}", "--model", "random",
                 "--name", "by-cli"]) == 0  # fmt: skip
    state, _ = run_job(rooted, f"manifest:{manifest}", "by-job")
    assert state.status == "done", state.error
    for name in ("by-cli", "by-job"):
        stored = everything_under(settings.index_dir / name)
        assert str(archive.root).encode() not in stored and PATIENT_FOLDER.encode() not in stored
        catalog = json.loads(next(settings.index_dir.glob(f"{name}/*/catalog.json")).read_text())
        assert catalog["corpus"]["paths"] == "source-references"
        loaded = load_index(name, RANDOM, settings)
        assert loaded.items["f0"]["path"] is None and loaded.items["note"]["text"]
        assert loaded.item("f0")["path"] == str(films[0].resolve())
        assert loaded.item("f1")["path"] == str(films[1].resolve())
        assert loaded.item("note")["path"] is None
