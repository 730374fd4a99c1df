"""A labelled DICOM folder gets its CSV's vocabulary; one source grammar for every caller
(issue 23, item 5's part and the two `parse_source` grammars made one)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from medheb_app.index.build import build_from_source
from medheb_app.index.catalog import load_index, query_vocabulary
from medheb_app.index.sources import SourceError, parse_source
from medheb_app.tasks import cxr_retrieve
from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite, benchmark_source
from tests.ingest_fixtures import film


def test_a_dicom_labels_csv_keyed_by_study_uid_is_the_index_vocabulary(settings, tmp_path):
    root = tmp_path / "pacs"
    films = [film(root / f"IM{n}.dcm", seed=n) for n in range(3)]
    pd.DataFrame(
        [
            {"StudyInstanceUID": str(films[0].StudyInstanceUID), "Emphysema": 1, "Bulla": 0},
            {"StudyInstanceUID": str(films[1].StudyInstanceUID), "Emphysema": 0, "Bulla": -1},
        ]
    ).to_csv(root / "labels.csv", index=False)
    report = build_from_source(f"dicom:{root}", "random", "pacs", settings)
    assert report.n_items == 3 and report.failed == 0  # labels.csv is not an archive file
    loaded = load_index("pacs", "8edde42cb6a477b6", settings)
    assert loaded.info["vocabulary"] == {
        "names": ["Emphysema", "Bulla"],
        "scheme": "coded",
        "source": "dicom",
    }
    assert query_vocabulary(loaded) == ("Emphysema", "Bulla")
    findings = sorted(str(row["findings"]) for row in loaded.items.values())
    assert findings == [
        "{'Emphysema': 0, 'Bulla': -1}",
        "{'Emphysema': 1, 'Bulla': 0}",
        "{}",
    ]


def test_the_benchmark_reads_sources_with_the_index_grammar() -> None:
    assert not hasattr(cxr_retrieve, "parse_source") or (
        cxr_retrieve.parse_source is parse_source  # the one parser, imported
    )
    spec = benchmark_source("nih: ~/nih-cxr14 ")
    assert spec == parse_source("nih: ~/nih-cxr14 ")
    assert spec.path == Path("~/nih-cxr14").expanduser()
    assert benchmark_source("MIMIC:/data/mimic").kind == "mimic"  # kinds case-insensitive
    for wrong, words in (
        ("chexpert:/x", "cannot read 'chexpert:/x'"),
        ("phantom:40", "cannot read 'phantom:40'"),
        ("nih:", "needs a path"),
        ("pacs:/x", "Unknown source"),
    ):
        with pytest.raises(ValueError, match=words):
            benchmark_source(wrong)
    with pytest.raises(ValueError, match="cannot read 'folder:/x'"):
        CxrRetrieveSuite(data="folder:/x")
    with pytest.raises(SourceError):
        parse_source("nih:")
