"""Indiana University chest X-ray reports (NLMCXR XML, shipped in torchxrayvision) -> text Studies.

Each report is one Study of form "text" whose text is the FINDINGS section; the IMPRESSION,
the MeSH terms (major and automatic) and the ids of the report's images travel in meta.
Reports lacking FINDINGS or IMPRESSION are dropped (they cannot pair findings with an
impression). Licence of the reports: CC BY-NC-ND 4.0.
"""

from __future__ import annotations

import importlib.util
import tarfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path

from medheb_app.evidence.study import EvidenceError, Study

LICENSE = "CC BY-NC-ND 4.0"


def bundled_reports() -> Path:
    """torchxrayvision's copy of NLMCXR_reports.tgz, found without importing torch."""
    spec = importlib.util.find_spec("torchxrayvision")
    if spec is None or spec.origin is None:
        raise EvidenceError("torchxrayvision is not installed, so its IU X-ray reports are absent.")
    return Path(spec.origin).parent / "data" / "NLMCXR_reports.tgz"


def _xml_documents(source: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every .xml report in a .tgz or a folder of XML files."""
    if source.is_dir():
        for path in sorted(source.rglob("*.xml")):
            yield path.name, path.read_bytes()
        return
    try:
        with tarfile.open(source) as archive:
            for member in archive:
                if member.isfile() and member.name.endswith(".xml"):
                    handle = archive.extractfile(member)
                    if handle is not None:
                        yield Path(member.name).name, handle.read()
    except tarfile.TarError as error:
        raise EvidenceError(f"{source.name} is not a readable .tgz of reports ({error}).") from None


def parse_report(data: bytes, name: str) -> Study | None:
    """One NLMCXR XML report -> a text Study, or None when FINDINGS or IMPRESSION is empty."""
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as error:
        raise EvidenceError(f"{name} is not a well-formed XML report ({error}).") from None
    sections = {
        (node.get("Label") or "").upper(): " ".join((node.text or "").split())
        for node in root.iter("AbstractText")
    }
    findings, impression = sections.get("FINDINGS", ""), sections.get("IMPRESSION", "")
    if not findings or not impression:
        return None
    report_id = root.find("IUXRId")
    key = report_id.get("id") if report_id is not None else Path(name).stem
    mesh = root.find("MeSH")
    major = [m.text for m in mesh.iter("major") if m.text] if mesh is not None else []
    automatic = [m.text for m in mesh.iter("automatic") if m.text] if mesh is not None else []
    return Study(
        id=f"iu-{key}",
        form="text",
        modality="CR",
        text=findings,
        source="iu-xray",
        meta={
            "impression": impression,
            "indication": sections.get("INDICATION") or None,
            "mesh_major": major,
            "mesh_automatic": automatic,
            "images": [node.get("id") for node in root.iter("parentImage")],
            "license": LICENSE,
        },
    )


def load_iu_reports(source: Path | str | None = None) -> list[Study]:
    """Every IU report with both FINDINGS and IMPRESSION (default: torchxrayvision's copy)."""
    path = Path(source) if source is not None else bundled_reports()
    if not path.exists():
        raise EvidenceError(f"{path} does not exist; expected NLMCXR_reports.tgz or its folder.")
    studies = [s for n, d in _xml_documents(path) if (s := parse_report(d, n)) is not None]
    if not studies:
        raise EvidenceError(f"{path.name} holds no report with both FINDINGS and IMPRESSION.")
    return studies
