"""Traceable hits for those allowed, nothing for anyone else (issue 23.3).

A lab's archive sits in a patient-named folder (`DOE^JANE_MRN900042`) with identifying DICOM
tags. After building it through the CLI and the admin job, that name is in no file of the
index folder, no log line and no CLI output; ids are keyed pseudonyms; `index resolve` and
the API route (resolve scope) give the file and UIDs back; anonymous callers get 401.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from medheb_app.api.problems import install_handlers
from medheb_app.api.security import ApiLimits
from medheb_app.api.source_routes import router
from medheb_app.api.tokens import create_token
from medheb_app.cli import main
from medheb_app.index.catalog import load_index
from medheb_app.index.provenance import pseudonym, pseudonym_key
from medheb_app.services.admin_jobs import index_job
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from tests.ingest_fixtures import PATIENT_FOLDER, film, image

RANDOM = "8edde42cb6a477b6"


def pacs(tmp_path):
    """A DICOM export in a patient-named folder: two films of one patient, one SR."""
    root = tmp_path / "exports" / PATIENT_FOLDER
    films = [film(root / f"IM{n}.dcm", seed=n) for n in range(2)]
    film(root / "SR.dcm", with_pixels=False)
    return root, films


def everything_under(folder) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_a_patient_named_folder_reaches_no_index_file_log_or_output(
    settings, tmp_path, capsys, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    root, films = pacs(tmp_path)
    folder = tmp_path / "pngs" / PATIENT_FOLDER
    image(folder / "chest.png")
    (folder / "readme.txt").write_text("export")
    for name, source in (("pacs", f"dicom:{root}"), ("pngs", f"folder:{folder}")):
        code = main(["index", "build", "--source", source, "--model", "random", "--name", name])
        assert code == 0
    job_log: list[str] = []
    index_job(settings)(
        {"name": "pacs-job", "model": "random", "source": f"dicom:{root}"},
        lambda fraction, message: job_log.append(message),
        job_log.append,
        threading.Event(),
    )
    main(["index", "list"])
    main(["index", "info", "pacs"])
    captured = capsys.readouterr()
    said = captured.out + captured.err + caplog.text + "\n".join(job_log)
    stored = everything_under(settings.index_dir)
    for secret in (PATIENT_FOLDER, "DOE^JANE", "MRN900042", "St Elsewhere"):
        assert secret not in said and secret.encode() not in stored, secret
    for uid in (str(films[0].SeriesInstanceUID), str(films[0].StudyInstanceUID)):
        assert uid not in said and uid.encode() not in stored  # UIDs identify too
    assert "not indexed: 1 no pixel data" in job_log
    catalog = json.loads(next(settings.index_dir.glob("pacs/*/catalog.json")).read_text())
    corpus = catalog["corpus"]
    assert corpus["kind"] == "dicom" and corpus["root"] == "local"
    assert corpus["ids"] == "hmac-sha256-v1" and corpus["spec"].startswith("dicom:local/source-")


def test_ids_are_keyed_pseudonyms_and_index_resolve_gives_the_source_back(
    settings, tmp_path, capsys, monkeypatch
) -> None:
    root, films = pacs(tmp_path)
    monkeypatch.setenv("MEDHEB_SOURCE_ROOTS", f"pacs={tmp_path / 'exports'}")
    assert main(["index", "build", "--source", f"dicom:{root}", "--model", "random",
                 "--name", "pacs"]) == 0  # fmt: skip
    loaded = load_index("pacs", RANDOM, settings)
    series = str(films[0].SeriesInstanceUID)
    item = pseudonym(pseudonym_key(settings), "dicom", series)
    assert item in loaded.items
    unkeyed = f"dicom-{hashlib.sha256(series.encode()).hexdigest()[:16]}"  # the old id
    assert unkeyed not in loaded.items  # guessable from the UID alone: no longer the id
    other = Settings.from_env(pseudonym_key="another lab's key")
    assert pseudonym(pseudonym_key(other), "dicom", series) != item
    assert (
        json.loads(next(settings.index_dir.glob("pacs/*/catalog.json")).read_text())["corpus"][
            "root"
        ]
        == "pacs"
    )
    capsys.readouterr()
    assert main(["index", "resolve", "pacs", item]) == 0
    out = capsys.readouterr().out
    assert f"SeriesInstanceUID {series}" in out
    assert str(films[0].SOPInstanceUID) in out and str(films[0].StudyInstanceUID) in out
    assert f"file {root / 'IM0.dcm'}" in out and "(pacs source)" in out
    assert main(["index", "resolve", "pacs", "dicom-0000000000000000", "--json"]) == 2
    assert "has no source reference" in capsys.readouterr().err


@pytest.fixture
def api(settings, tmp_path):
    store = Store.open(settings.database_url)
    app = FastAPI()
    app.state.services = SimpleNamespace(settings=settings, store=store)
    app.state.limits = ApiLimits(token_rate=600)
    install_handlers(app)
    app.include_router(router)
    return SimpleNamespace(client=TestClient(app), store=store)


def test_the_api_resolves_for_resolve_tokens_only(settings, tmp_path, api) -> None:
    folder = tmp_path / "pngs" / PATIENT_FOLDER
    image(folder / "sub" / "chest.png")
    assert main(["index", "build", "--source", f"folder:{folder}", "--model", "random",
                 "--name", "pngs"]) == 0  # fmt: skip
    item = pseudonym(pseudonym_key(settings), "folder", "sub/chest.png")
    route = f"/indices/pngs/items/{item}/source"
    anonymous = api.client.get(route)
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"].startswith("application/problem+json")
    search, _ = create_token(api.store, "search", 1, "search only")
    narrow = api.client.get(route, headers={"Authorization": f"Bearer {search}"})
    assert narrow.status_code == 403
    read, _ = create_token(api.store, "read", 1, "reader")
    reader = api.client.get(route, headers={"Authorization": f"Bearer {read}"})
    assert reader.status_code == 403  # reading records is not re-identifying them
    assert "resolve" in reader.json()["detail"]
    resolver, _ = create_token(api.store, "resolve", 1, "records office")
    granted = api.client.get(route, headers={"Authorization": f"Bearer {resolver}"})
    assert granted.status_code == 200
    body = granted.json()
    assert body["relative_path"] == "sub/chest.png" and body["kind"] == "file"
    assert body["root"] == "local" and str(tmp_path) not in granted.text  # no server path
    missing = api.client.get(
        "/indices/pngs/items/folder-0/source", headers={"Authorization": f"Bearer {resolver}"}
    )
    assert missing.status_code == 404


def test_the_server_finds_a_pseudonymous_hits_file_to_show_its_image(settings, tmp_path) -> None:
    folder = tmp_path / "pngs" / PATIENT_FOLDER
    chest = image(folder / "sub" / "chest.png")
    assert main(["index", "build", "--source", f"folder:{folder}", "--model", "random",
                 "--name", "pngs"]) == 0  # fmt: skip
    loaded = load_index("pngs", RANDOM, settings)
    item = pseudonym(pseudonym_key(settings), "folder", "sub/chest.png")
    assert loaded.items[item].get("path") is None  # the index folder names no file
    assert loaded.item(item)["path"] == str(chest.resolve())  # the server's references do
