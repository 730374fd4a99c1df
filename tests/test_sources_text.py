"""Text adapters on real data: IU X-ray reports (torchxrayvision) and PubMedQA PQA-L."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from medheb_app.evidence.sources.iu_xray import bundled_reports, load_iu_reports
from medheb_app.evidence.sources.pubmedqa import load_pubmedqa
from medheb_app.evidence.study import EvidenceError
from tests.conftest import PUBMEDQA_DIR, require_shared

REPORT_ID = r'<IUXRId id="(\d+)"'
SECTION = r'<AbstractText Label="{}">([^<]*\S[^<]*)</AbstractText>'


def test_iu_reports_keep_exactly_those_with_findings_and_impression() -> None:
    expected = set()
    with tarfile.open(bundled_reports()) as archive:
        for member in archive:
            if member.name.endswith(".xml"):
                text = archive.extractfile(member).read().decode()  # type: ignore[union-attr]
                if re.search(SECTION.format("FINDINGS"), text) and re.search(
                    SECTION.format("IMPRESSION"), text
                ):
                    report_id = re.search(REPORT_ID, text)
                    assert report_id is not None
                    expected.add(f"iu-{report_id.group(1)}")
    studies = load_iu_reports()
    assert {s.id for s in studies} == expected and len(studies) == len(expected)
    first = next(s for s in studies if s.id == "iu-1")
    assert first.form == "text" and first.text is not None
    assert first.text.startswith("The cardiac silhouette and mediastinum size")
    assert first.meta["impression"] == "Normal chest x-XXXX."
    assert first.meta["mesh_major"] == ["normal"]
    assert first.meta["images"] == ["CXR1_1_IM-0001-3001", "CXR1_1_IM-0001-4001"]
    assert all(s.text and s.meta["impression"] for s in studies)


def test_iu_folder_of_xml_and_drop_rule(tmp_path: Path) -> None:
    whole = """<eCitation><IUXRId id="7"/><MedlineCitation><Article><Abstract>
      <AbstractText Label="FINDINGS">Small right effusion.</AbstractText>
      <AbstractText Label="IMPRESSION">Effusion.</AbstractText></Abstract></Article>
      </MedlineCitation><MeSH><major>Pleural Effusion/right/small</major>
      <automatic>effusion</automatic></MeSH></eCitation>"""
    (tmp_path / "7.xml").write_text(whole)
    (tmp_path / "8.xml").write_text(
        whole.replace('id="7"', 'id="8"').replace("Small right effusion.", "")
    )
    (study,) = load_iu_reports(tmp_path)
    assert study.id == "iu-7" and study.meta["mesh_major"] == ["Pleural Effusion/right/small"]
    assert study.meta["mesh_automatic"] == ["effusion"]
    (tmp_path / "9.xml").write_text("<eCitation><broken>")
    with pytest.raises(EvidenceError, match=r"9\.xml is not a well-formed XML report"):
        load_iu_reports(tmp_path)


def test_pubmedqa_linked_question_context_answer() -> None:
    directory = require_shared(PUBMEDQA_DIR)
    raw = json.loads((directory / "ori_pqal.json").read_text())
    truth = json.loads((directory / "test_ground_truth.json").read_text())
    data = load_pubmedqa(directory)
    assert len(data) == len(raw) == 1000
    assert sum(q.split == "test" for q in data.questions) == len(truth) == 500
    for question, context, answer in zip(data.questions, data.contexts, data.answers, strict=True):
        pmid = question.meta["pmid"]
        assert context.meta["pmid"] == answer.meta["pmid"] == pmid
        assert question.text == raw[pmid]["QUESTION"] and answer.text == raw[pmid]["LONG_ANSWER"]
        assert raw[pmid]["CONTEXTS"][0] in context.text
        if pmid in truth:
            assert question.meta["decision"] == truth[pmid]
    first = data.contexts[0]
    assert first.text.startswith(f"{raw[first.meta['pmid']]['LABELS'][0]}: ")
    assert len({s.id for s in data.questions + data.contexts + data.answers}) == 3000


def test_pubmedqa_bad_layouts(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match=r"has no ori_pqal\.json"):
        load_pubmedqa(tmp_path)
    (tmp_path / "ori_pqal.json").write_text(json.dumps({"1": {"QUESTION": "q"}}))
    (tmp_path / "test_ground_truth.json").write_text("{}")
    with pytest.raises(EvidenceError, match="PMID 1 lacks CONTEXTS"):
        load_pubmedqa(tmp_path)
