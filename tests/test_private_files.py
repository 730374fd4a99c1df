"""Files that can lead to a patient are readable by the server's user only: the SQLite
database (audit query texts, the source references from pseudonym to file), an index's
failed.jsonl (paths relative to the source) and an audit export."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np

from medheb_app.store.db import make_engine


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_sqlite_database_and_its_journal_are_owner_only(tmp_path: Path) -> None:
    database = tmp_path / "data" / "medheb.sqlite"
    engine = make_engine(f"sqlite:///{database}")
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE t (x TEXT)")
        connection.exec_driver_sql("INSERT INTO t VALUES ('DOE^JANE')")
    members = [p for p in database.parent.iterdir() if p.name.startswith("medheb.sqlite")]
    assert database in members and len(members) >= 2  # the WAL is there while connected
    assert {p.name: _mode(p) for p in members} == {p.name: 0o600 for p in members}
    engine.dispose()


def test_an_existing_world_readable_database_is_narrowed(tmp_path: Path) -> None:
    database = tmp_path / "old.sqlite"
    make_engine(f"sqlite:///{database}").dispose()
    database.chmod(0o644)
    make_engine(f"sqlite:///{database}").dispose()
    assert _mode(database) == 0o600
    make_engine("sqlite:///:memory:").dispose()  # nothing on disk to narrow


def test_failed_jsonl_and_the_audit_export_are_owner_only(tmp_path: Path, monkeypatch, capsys):
    from PIL import Image

    from medheb_app import cli
    from medheb_app.index.build import build_from_source
    from medheb_app.settings import Settings

    source = tmp_path / "DOE^JANE_MRN900042"
    source.mkdir()
    for i in range(3):
        Image.fromarray(np.full((32, 32), 40 * i, np.uint8)).save(source / f"film{i}.png")
    (source / "notes.txt").write_text("not an image")
    settings = Settings.from_env(data_dir=tmp_path / "data")
    report = build_from_source(f"folder:{source}", "random", "ward", settings)
    failed = Path(report.directory) / "failed.jsonl"
    assert [json.loads(line)["item"] for line in failed.read_text().splitlines()] == ["notes.txt"]
    assert _mode(failed) == 0o600
    monkeypatch.setenv("DATA_DIR", str(settings.data_dir))
    out = tmp_path / "audit.csv"
    out.write_text("")
    out.chmod(0o644)
    assert cli.main(["audit", "export", "--since", "2000-01-01", "--out", str(out)]) == 0
    assert _mode(out) == 0o600 and out.read_text().startswith("id,at,who")
    assert _mode(settings.data_dir / "medheb.sqlite") == 0o600
