"""CXR-Retrieve: compositional text-to-image retrieval over labelled chest radiographs.

The benchmark (CXR-Retrieve section 3) is 145 queries over the ten findings: 10 single "A",
45 pairs "A and B" and 90 negations "A and no B", plus the paraphrased negation set "an image
with A but without B" (section 5.3). A retrieved image is relevant when it satisfies every
asserted constraint (section 3.2): positives need label 1; "no B" holds when B is not 1 (main)
or only when B is a confirmed 0 (strict). A hard negative of "A and no B" has A and B both 1
(section 3.3). The gallery can be any labelled chest X-ray Study list: the phantom corpus,
NIH ChestX-ray14 or MIMIC-CXR-JPG.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations, permutations
from typing import Literal

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.evidence.phantoms.corpus import load_corpus
from medheb_app.evidence.phantoms.saved import demo_corpus
from medheb_app.evidence.sources.mimic import load_mimic
from medheb_app.evidence.sources.nih import load_nih
from medheb_app.evidence.study import Study
from medheb_app.index.sources import SourceError, SourceSpec, parse_source
from medheb_app.query.parser import ParsedQuery, Setting, is_hard_negative, satisfies
from medheb_app.settings import Settings
from medheb_app.tasks.base import Item

Kind = Literal["single", "pair", "negation"]
KINDS: tuple[Kind, ...] = ("single", "pair", "negation")


@dataclass(frozen=True)
class BenchmarkQuery:
    """One benchmark query: its text as a model reads it and its constraints as ground truth."""

    id: str
    kind: Kind
    text: str
    positives: tuple[str, ...]
    negatives: tuple[str, ...] = ()

    @property
    def constraints(self) -> ParsedQuery:
        """The ground-truth constraints (from the template, never from parsing the text)."""
        return ParsedQuery(text=self.text, positive=self.positives, negative=self.negatives)


def single_text(a: str) -> str:
    return a


def pair_text(a: str, b: str) -> str:
    """Section 3.2 template, e.g. "Edema and consolidation"."""
    return f"{a} and {b.lower()}"


def negation_text(a: str, b: str) -> str:
    """Section 3.2 template, e.g. "Edema and no consolidation"."""
    return f"{a} and no {b.lower()}"


def paraphrased_negation_text(a: str, b: str) -> str:
    """Section 5.3 paraphrase: "an image with A but without B"."""
    return f"an image with {a.lower()} but without {b.lower()}"


def benchmark_queries(
    vocabulary: Sequence[str] = CXR_RETRIEVE_10, paraphrase: bool = False
) -> list[BenchmarkQuery]:
    """The 10 + 45 + 90 = 145 queries; `paraphrase` rewords only the negation set."""
    names = list(vocabulary)
    queries = [
        BenchmarkQuery(f"single-{i:02d}", "single", single_text(a), (a,))
        for i, a in enumerate(names)
    ]
    queries += [
        BenchmarkQuery(f"pair-{i:02d}", "pair", pair_text(a, b), (a, b))
        for i, (a, b) in enumerate(combinations(names, 2))
    ]
    negate = paraphrased_negation_text if paraphrase else negation_text
    prefix = "negpara" if paraphrase else "neg"
    queries += [
        BenchmarkQuery(f"{prefix}-{i:02d}", "negation", negate(a, b), (a,), (b,))
        for i, (a, b) in enumerate(permutations(names, 2))
    ]
    return queries


def relevant_ids(
    query: BenchmarkQuery, gallery: Sequence[Study], setting: Setting = "main"
) -> set[str]:
    """Ids of gallery images that satisfy every constraint of `query` (section 3.2)."""
    constraints = query.constraints
    return {s.id for s in gallery if satisfies(s.findings, constraints, setting)}


def hard_negative_ids(query: BenchmarkQuery, gallery: Sequence[Study]) -> set[str]:
    """Ids with A and B both positive, for "A and no B" (section 3.3); empty otherwise."""
    if query.kind != "negation":
        return set()
    constraints = query.constraints
    return {s.id for s in gallery if is_hard_negative(s.findings, constraints)}


@dataclass
class Gallery:
    """The images searched, with what the user must know about their labels."""

    studies: list[Study]
    source: str
    split: str | None
    notes: list[str] = field(default_factory=list)
    vocabulary: tuple[str, ...] = CXR_RETRIEVE_10

    def __len__(self) -> int:
        return len(self.studies)


@dataclass
class CxrRetrieveTask:
    """The benchmark as a task of the evaluation runner: 145 text queries over a gallery.

    Queries are the template texts (ids as `benchmark_queries`); candidates are the gallery's
    studies. Relevance is by constraints (`relevant_ids`, main or strict), so the oracle of
    this task is the label oracle (medheb_app.eval.rankers)."""

    gallery: Gallery
    paraphrase: bool = False
    name: str = "cxr-retrieve"
    instruction: str = ""
    benchmark: list[BenchmarkQuery] = field(init=False)
    queries: list[Item] = field(init=False)
    candidates: list[Item] = field(init=False)

    def __post_init__(self) -> None:
        self.benchmark = benchmark_queries(self.gallery.vocabulary, paraphrase=self.paraphrase)
        self.queries = [Item(q.id, q.text) for q in self.benchmark]
        self.candidates = [Item(s.id, s) for s in self.gallery.studies]


def label_notes(studies: Sequence[Study], vocabulary: Sequence[str] = CXR_RETRIEVE_10) -> list[str]:
    """Facts about the labels that change how results read, found from the data itself.

    E.g. NIH ChestX-ray14 has no Fracture label and no confirmed negatives (positive-only).
    """
    notes = []
    never = [f for f in vocabulary if all(s.findings.get(f) is None for s in studies)]
    if never:
        notes.append(
            f"Never labelled in this gallery: {', '.join(never)}; queries that require them "
            "have no relevant image, and 'no X' on them is always satisfied in the main setting."
        )
    if studies and not any(s.findings.get(f) == 0 for s in studies for f in vocabulary):
        notes.append(
            "No confirmed negatives (label 0) in this gallery: the labels are positive-only, so "
            "the strict setting has no relevant image for any negation query."
        )
    if studies and not any(s.findings.get(f) == -1 for s in studies for f in vocabulary):
        notes.append("No uncertain (-1) labels in this gallery.")
    return notes


def _phantom_studies(settings: Settings) -> list[Study]:
    """The demo phantom corpus exactly as the app indexes it: the saved PNGs under
    DATA_DIR/demo (generated and saved first when absent, as `demo build` does), never a
    regenerated in-memory copy, so evaluation and search read the same pixels."""
    return load_corpus(demo_corpus(settings))


def _nih_studies(path: str) -> list[Study]:
    return load_nih(path)


def _mimic_studies(path: str) -> list[Study]:
    return load_mimic(path)


BENCHMARK_KINDS = ("phantom", "nih", "mimic")


def benchmark_source(source: str) -> SourceSpec:
    """The benchmark's `--data`, read by the one source grammar (`index build --source`,
    index/sources.parse_source) and limited to the sources whose labels the benchmark scores:
    'phantom', 'nih:PATH' (NIH ChestX-ray14 folder) or 'mimic:PATH' (MIMIC-CXR-JPG folder)."""
    try:
        spec = parse_source(source)
    except SourceError as error:
        raise ValueError(
            f"{error} The benchmark reads 'phantom', 'nih:PATH' or 'mimic:PATH'."
        ) from None
    if spec.kind not in BENCHMARK_KINDS or spec.n is not None:
        raise ValueError(
            f"The CXR-Retrieve benchmark cannot read {source!r}; use 'phantom', 'nih:PATH' "
            "(NIH ChestX-ray14 folder) or 'mimic:PATH' (MIMIC-CXR-JPG folder)."
        )
    return spec


def load_studies(source: str, settings: Settings) -> list[Study]:
    """Every labelled chest X-ray of a source, all splits."""
    spec = benchmark_source(source)
    if spec.kind == "phantom":
        return _phantom_studies(settings)
    if spec.kind == "nih":
        return _nih_studies(str(spec.path))
    return _mimic_studies(str(spec.path))


def select_split(studies: Sequence[Study], split: str | None) -> list[Study]:
    """Studies of one split ("train", "val", "test"); None or "all" keeps everything."""
    if split in (None, "all"):
        return list(studies)
    chosen = [s for s in studies if s.split == split]
    if not chosen:
        present = sorted({str(s.split) for s in studies})
        raise ValueError(f"No studies in split {split!r}; splits present: {', '.join(present)}.")
    return chosen


def gallery_from_studies(studies: Sequence[Study], source: str, split: str | None) -> Gallery:
    """The 2D chest radiographs of `split` among studies already loaded, with label notes."""
    chosen = [s for s in select_split(studies, split) if s.form == "2d"]
    if not chosen:
        raise ValueError(f"Source {source!r} has no 2D chest radiographs in split {split!r}.")
    return Gallery(chosen, source=source, split=split, notes=label_notes(chosen))


def load_gallery(source: str, settings: Settings, split: str | None = "test") -> Gallery:
    """The 2D chest radiographs of `source` in `split`, with label notes."""
    return gallery_from_studies(load_studies(source, settings), source, split)


SUITE_NAME = "cxr-retrieve"


@dataclass(frozen=True)
class CxrRetrieveSuite:
    """`bench run --suite cxr-retrieve`: which gallery, which relevance setting, which wording.

    `probe_views` is what logic: rankers' probes read besides the whole image."""

    data: str = "phantom"
    split: str | None = "test"
    setting: Setting = "main"
    paraphrase: bool = False
    probe_views: str = "2x2+3x3"
    name: str = SUITE_NAME

    def __post_init__(self) -> None:
        benchmark_source(self.data)
        if self.setting not in ("main", "strict"):
            raise ValueError(f"Unknown setting {self.setting!r}; use 'main' or 'strict'.")

    @classmethod
    def from_options(
        cls, data: str, split: str, setting: str, paraphrase: bool, probe_views: str
    ) -> CxrRetrieveSuite:
        """From the CLI's flags: split 'all' means every study."""
        return cls(
            data=data,
            split=None if split == "all" else split,
            setting=setting,  # type: ignore[arg-type]
            paraphrase=paraphrase,
            probe_views=probe_views,
        )

    def build(self, settings: Settings) -> tuple[Gallery, list[Study]]:
        """(the gallery of `split`, the source's train studies for logic: probes)."""
        studies = load_studies(self.data, settings)
        gallery = gallery_from_studies(studies, self.data, self.split)
        return gallery, [s for s in studies if s.split == "train"]

    def describe(self) -> dict[str, object]:
        return {
            "data": self.data,
            "split": self.split or "all",
            "setting": self.setting,
            "paraphrase": self.paraphrase,
            "probe_views": self.probe_views,
        }
