"""The query parser: latency per query and how it reads report sentences against labels.

    .venv/bin/python bench/bench_query_parser.py            # 1,000 phantom reports, seed 0
    .venv/bin/python bench/bench_query_parser.py --iu       # the IU X-ray reports vs MeSH

`--iu` reads FINDINGS + IMPRESSION of every Indiana University chest X-ray report that
torchxrayvision ships (NLMCXR_reports.tgz, 3,927 with either section) with the CheXpert 14
and compares the reading with the report's MeSH major headings (MESH_FINDINGS below): inverted
reports (a MeSH finding the parser excludes), MeSH-normal reports with a finding required,
and per MeSH finding whether it was read as required, uncertain, excluded or left open; with
20 sampled errors of each kind and the sentences behind them (query/provenance.py).

Parses, with the CXR-Retrieve ten and the CheXpert 14: the 145 CXR-Retrieve benchmark
queries, `--reports` phantom reports (radiologist phrasing that asserts, negates or hedges each
coded finding; pixels are not rendered) and worst cases at the 1,000-character limit (one made
of words the parser does not know, so every word goes through the spelling check). Prints
p50 / p95 / max milliseconds per query, and for the reports how often a finding the labels say
is present was excluded, a confirmed-absent one required, and what share of present findings
was read as required. Results are markdown; BENCHMARKS.md quotes them with this command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import tarfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from medheb_app.evidence.findings import CHEXPERT_14, CXR_RETRIEVE_10  # noqa: E402
from medheb_app.evidence.phantoms.labels import sample_label_rows  # noqa: E402
from medheb_app.evidence.phantoms.plan import plan_findings  # noqa: E402
from medheb_app.evidence.phantoms.reports import write_report  # noqa: E402
from medheb_app.evidence.sources.iu_xray import bundled_reports  # noqa: E402
from medheb_app.query.parser import MAX_QUERY_CHARS, parse_query  # noqa: E402
from medheb_app.query.provenance import sources  # noqa: E402
from medheb_app.tasks.cxr_retrieve import benchmark_queries  # noqa: E402


def reports(n: int, seed: int) -> list[tuple[str, dict]]:
    rows = []
    for index, row in enumerate(sample_label_rows(n, seed)):
        specs = plan_findings(row.findings, np.random.default_rng([seed, 1, index]))
        text = write_report(row.findings, specs, row.view, np.random.default_rng([seed, 2, index]))
        rows.append((text, dict(row.findings)))
    return rows


def worst_cases() -> list[str]:
    unknown = " ".join(f"zorbl{chr(97 + i % 26)}x" for i in range(200))[:MAX_QUERY_CHARS]
    misspelt = " ".join(["efusion and no pneumothrax"] * 60)[:MAX_QUERY_CHARS]
    sentences = " ".join(["Heart size is normal. No effusion or pneumothorax."] * 30)
    return [unknown, misspelt, sentences[:MAX_QUERY_CHARS]]


def timed(texts: list[str], parse: Callable[[str], object]) -> list[float]:
    for text in texts[:5]:
        parse(text)  # warm the per-vocabulary phrase table
    times = []
    for text in texts:
        started = time.perf_counter()
        parse(text)
        times.append((time.perf_counter() - started) * 1000)
    return times


def row(name: str, times: list[float]) -> str:
    p50, p95 = np.percentile(times, [50, 95])
    return f"| {name} | {len(times)} | {p50:.2f} | {p95:.2f} | {max(times):.2f} |"


# MeSH major heading -> the CheXpert finding it codes, with why. A heading's sub-headings
# ("Opacity/lung/base/left/mild") say where; the rules below read them. Headings not listed
# (Cicatrix, Calcinosis, Granulomatous Disease, Lung/hyperdistention, Costophrenic Angle,
# Thickening, Emphysema, Hernia, devices...) code nothing the CheXpert 14 reading can be
# checked against without guessing, so they are not compared.
MESH_FINDINGS: dict[str, tuple[str, str]] = {
    "Cardiomegaly": ("Cardiomegaly", "the same concept ('/borderline' too: the indexer coded it)"),
    "Pulmonary Atelectasis": ("Atelectasis", "the same concept"),
    "Volume Loss": ("Atelectasis", "CheXpert's Atelectasis mentions include volume loss"),
    "Pleural Effusion": ("Pleural Effusion", "the same concept"),
    "Pneumothorax": ("Pneumothorax", "the same concept"),
    "Pneumonia": ("Pneumonia", "the same concept"),
    "Consolidation": ("Consolidation", "the same concept"),
    "Pulmonary Edema": ("Edema", "the same concept"),
    "Pulmonary Congestion": ("Edema", "CheXpert's Edema mentions include vascular congestion"),
    "Fractures, Bone": ("Fracture", "the same concept (any bone the film shows)"),
    "Nodule": ("Lung Lesion", "CheXpert files nodules under Lung Lesion"),
    "Mass": ("Lung Lesion", "CheXpert files masses under Lung Lesion"),
    "Opacity": ("Lung Opacity", "the same concept, unless a sub-heading puts it outside the lung "
                "or calls it round (below)"),
    "Density": ("Lung Opacity", "as Opacity: the indexers use both for a radiographic density"),
    "Airspace Disease": ("Lung Opacity", "CheXpert's Lung Opacity mentions airspace disease"),
    "Infiltrate": ("Lung Opacity", "CheXpert reads infiltrate as Lung Opacity"),
}  # fmt: skip
# Opacity / Density with one of these sub-headings is not a lung opacity: the site is outside
# the lung parenchyma (a hiatal hernia is "Density/mediastinum", a rib lesion "Opacity/ribs").
OUTSIDE_LUNG = frozenset(
    {
        "mediastinum", "ribs", "spine", "thoracic vertebrae", "breast", "costophrenic angle",
        "pleura", "pleural sinus", "diaphragm", "heart", "soft tissue", "clavicle", "shoulder",
        "abdomen",
    }
)  # fmt: skip
# ... and "round" is how the indexers code a nodule: Lung Lesion, as CheXpert reads "nodular
# opacity / density".
ROUND = "round"


def mesh_findings(headings: list[str]) -> set[str]:
    """The CheXpert findings a report's MeSH major headings code (MESH_FINDINGS)."""
    found = set()
    for heading in headings:
        head, *subs = [part.strip() for part in heading.split("/")]
        if head not in MESH_FINDINGS:
            continue
        finding = MESH_FINDINGS[head][0]
        if head in ("Opacity", "Density"):
            if ROUND in subs:
                finding = "Lung Lesion"
            elif OUTSIDE_LUNG & set(subs):
                continue
        found.add(finding)
    return found


def iu_reports() -> list[tuple[str, str, list[str]]]:
    """(report id, FINDINGS + IMPRESSION, MeSH major headings) of every report with either."""
    rows = []
    with tarfile.open(bundled_reports()) as archive:
        for member in archive:
            if not (member.isfile() and member.name.endswith(".xml")):
                continue
            handle = archive.extractfile(member)
            root = ElementTree.fromstring(handle.read()) if handle else None
            if root is None:
                continue
            sections = {
                (node.get("Label") or "").upper(): " ".join((node.text or "").split())
                for node in root.iter("AbstractText")
            }
            text = " ".join(s for s in (sections.get("FINDINGS"), sections.get("IMPRESSION")) if s)
            if text:
                mesh = [m.text for m in root.iter("major") if m.text]
                rows.append((Path(member.name).stem, text, mesh))
    return rows


def _why(text: str, finding: str, state: str, parsed: object) -> str:
    """The sentences behind a finding's reading, for a reader of the sampled errors."""
    for reading in sources(parsed):  # type: ignore[arg-type]
        if reading.finding == finding:
            said = [f"[{s.state}] {s.sentence}" for s in reading.sources]
            return " | ".join(said) if said else "(no single sentence: a whole-text statement)"
    return f"(not named: {state})"


def iu_benchmark(sample: int, seed: int) -> None:
    """The IU X-ray figures: inverted, required-in-normal, how MeSH findings were read."""
    rows = iu_reports()
    rng = np.random.default_rng(seed)
    inverted, in_normal, open_, over = [], [], [], 0
    counts = {"required": 0, "uncertain": 0, "excluded": 0, "history": 0, "left open": 0}
    normal = 0
    started = time.perf_counter()
    for report_id, text, mesh in rows:
        over += len(text) > MAX_QUERY_CHARS
        parsed = parse_query(text, CHEXPERT_14, limit=20 * MAX_QUERY_CHARS)
        coded = mesh_findings(mesh)
        states = {
            **{n: "history" for n in parsed.history},
            **{n: "uncertain" for n in parsed.uncertain},
            **{n: "excluded" for n in parsed.negative},
            **{n: "required" for n in parsed.positive},
        }
        for finding in coded:
            counts[states.get(finding, "left open")] += 1
            if finding not in states:
                open_.append((report_id, finding, text, parsed))
        wrong = sorted(coded & set(parsed.negative))
        if wrong:
            inverted.append((report_id, wrong, text, parsed))
        if "normal" in mesh:
            normal += 1
            asserted = [n for n in parsed.positive if n != "No Finding"]
            if asserted:
                in_normal.append((report_id, asserted, text, parsed))
    seconds = time.perf_counter() - started
    mentions = sum(counts.values())
    print(
        f"{dt.date.today()} · IU X-ray (torchxrayvision NLMCXR_reports.tgz) · {len(rows)} "
        f"reports with FINDINGS or IMPRESSION, {over} over {MAX_QUERY_CHARS:,} characters "
        f"(read whole) · CheXpert 14 · {seconds:.1f} s\n"
    )
    print("| measure | count | share |\n|---|---|---|")
    print(f"| inverted reports (a MeSH finding excluded) | {len(inverted)} | "
          f"{100 * len(inverted) / len(rows):.2f}% of {len(rows)} reports |")  # fmt: skip
    print(f"| MeSH-normal reports with a finding required | {len(in_normal)} | "
          f"{100 * len(in_normal) / normal:.2f}% of {normal} normal reports |")  # fmt: skip
    for state, count in counts.items():
        print(f"| MeSH findings read as {state} | {count} | {100 * count / mentions:.1f}% of "
              f"{mentions} |")  # fmt: skip
    for title, errors in (
        ("inverted (MeSH finding excluded)", inverted),
        ("required in a MeSH-normal report", in_normal),
    ):
        print(f"\n## {min(sample, len(errors))} sampled of {len(errors)}: {title}\n")
        for k in sorted(rng.choice(len(errors), min(sample, len(errors)), replace=False)):
            report_id, names, text, parsed = errors[k]
            for name in names:
                print(f"- {report_id} {name}: {_why(text, name, 'excluded', parsed)}")
    print(f"\n## {min(sample, len(open_))} sampled of {len(open_)}: MeSH finding left open\n")
    for k in sorted(rng.choice(len(open_), min(sample, len(open_)), replace=False)):
        report_id, name, text, _ = open_[k]
        print(f"- {report_id} {name}: {text[:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iu", action="store_true", help="the IU X-ray reports against MeSH")
    parser.add_argument("--sample", type=int, default=20, help="errors printed per kind (--iu)")
    args = parser.parse_args()
    if args.iu:
        iu_benchmark(args.sample, args.seed)
        return
    corpus = reports(args.reports, args.seed)
    texts = {
        "CXR-Retrieve benchmark queries": [q.text for q in benchmark_queries()],
        "phantom reports": [text for text, _ in corpus],
        "1,000-character worst cases (x20)": worst_cases() * 20,
    }
    print(
        f"{dt.date.today()} · {platform.processor() or platform.machine()} · Python "
        f"{platform.python_version()} · {args.reports} reports, seed {args.seed}\n"
    )
    print("| vocabulary: texts | n | p50 ms | p95 ms | max ms |\n|---|---|---|---|---|")
    for vocabulary, label in ((CXR_RETRIEVE_10, "CXR-Retrieve 10"), (CHEXPERT_14, "CheXpert 14")):
        for name, items in texts.items():
            print(row(f"{label}: {name}", timed(items, lambda t, v=vocabulary: parse_query(t, v))))
    print("\n| vocabulary | present excluded | absent (0) required | present read as required |")
    print("|---|---|---|---|")
    for vocabulary, label in ((CXR_RETRIEVE_10, "CXR-Retrieve 10"), (CHEXPERT_14, "CheXpert 14")):
        excluded = required = read = present = 0
        for text, labels in corpus:
            parsed = parse_query(text, vocabulary)
            excluded += sum(labels.get(n) == 1 for n in parsed.negative)
            required += sum(labels.get(n) == 0 for n in parsed.positive)
            wanted = [n for n in vocabulary if labels.get(n) == 1 and n != "No Finding"]
            present += len(wanted)
            read += sum(n in parsed.positive for n in wanted)
        print(f"| {label} | {excluded} | {required} | {read} / {present} |")


if __name__ == "__main__":
    main()
