"""What a benchmark run will cost before it runs, read from the embedding cache's state.

For each task and model of a run: the distinct items the model will embed, how many of them
the embedding cache already holds, and the seconds the rest will take at the model's
throughput. Items are counted by the same content-addressed cache keys the rankers use
(`content_key` in eval/rankers.py, `crop_key` in ranking/views.py), so an estimate after a
run of the same tasks finds every item cached. Throughput is measured from earlier runs
(the runner records how many new vectors each model wrote and how long it took:
`new_vectors` below) or, until a model has been measured, a conservative default that the
estimate names as such. A cached vector is read, not recomputed; its small cost counts only
in `Cell.work`, the weight the runner's progress uses.

Rates are kept per model and per input kind (text, image, volume, crop: `item_kind`), since
one model embeds a text a hundred times faster than a volume; a model's whole-run rate is the
fallback, then the default. Random and oracle embed nothing and cost nothing in every suite.
The estimate is a range (`Estimate.range_seconds`): tight where the rate was measured per kind,
wide where it is a guess, and the runner's progress bar is weighted by the same cells.

Nothing here loads a model: fingerprints come from the registry's cards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from medheb_app.eval.rankers import content_key, item_kind, text_chars, unread_forms
from medheb_app.eval.results import Summary
from medheb_app.index.cache import EmbeddingCache, cache_key
from medheb_app.models import registry
from medheb_app.models.baselines import BASELINES
from medheb_app.models.registry import list_models
from medheb_app.ranking.logic_aware import PREFIX as LOGIC_PREFIX
from medheb_app.ranking.logic_aware import probe_file
from medheb_app.ranking.probes import ProbeConfig
from medheb_app.ranking.views import VIEW_SETS, crop_key
from medheb_app.settings import Settings
from medheb_app.train.config import config_from_sources
from medheb_app.train.loop import TrainingProgress
from medheb_app.train.recipes import get_recipe

# at the top of what was measured on a shared 2-core CPU machine, model load included:
# dual-lite 0.08 s/item on 658 texts (`bench run --family T-T`), 0.27 s/item on 45 images and
# 145 texts, logic:dual-lite 0.30 s/item on 2,503 images and crops (cxr-retrieve, phantom)
DEFAULT_SECONDS_PER_ITEM = 0.3
READ_SECONDS_PER_ITEM = 0.0005  # reading one cached vector (progress weights only)
KINDS = ("text", "image", "volume", "crop")
# how far a rate may be off, by where it comes from: (low, high) multipliers of the estimate,
# from estimate vs actual on this machine (BENCHMARKS.md, "Estimates")
RANGES = {
    "kind": (0.6, 1.6),  # measured for this model and input kind
    "model": (0.4, 2.5),  # measured for this model, all kinds together
    "calibrated": (0.3, 3.0),  # timed on a few items before a model's first run
    "default": (0.2, 5.0),  # never measured
    "none": (1.0, 1.0),  # nothing to embed
}
DEFAULT_RATE_NOTE = f"default {DEFAULT_SECONDS_PER_ITEM} s/item (not measured yet)"


@dataclass(frozen=True)
class Rate:
    """Seconds per embedded item for one model, where the figure comes from, and how good it
    is (a key of RANGES: measured per kind, per model, the default, or nothing to embed)."""

    seconds_per_item: float
    source: str
    quality: str = "default"
    per_char: float | None = None  # texts: seconds per character, where it was measured

    def for_texts(self, chars: float | None) -> Rate:
        """This rate for texts of `chars` characters on average: priced by length where the
        per-character cost was measured (a 20-character query embeds faster than a report)."""
        if self.per_char is None or not chars:
            return self
        per_item = self.per_char * chars
        source = (
            f"{1000 * self.per_char:.3f} s per 1,000 characters x {chars:.0f} characters "
            f"per text = {per_item:.4f} s/text ({self.source})"
        )
        return Rate(per_item, source, self.quality, self.per_char)


DEFAULT_RATE = Rate(DEFAULT_SECONDS_PER_ITEM, DEFAULT_RATE_NOTE, "default")


def rate_for(rates: Mapping[str, Rate], spec: str, kind: str, chars: float | None = None) -> Rate:
    """The rate of `spec` for `kind` (rates keyed "spec/kind" or "spec"), else the default;
    for texts averaging `chars` characters, priced by length where that was measured."""
    if spec.removeprefix(LOGIC_PREFIX) in BASELINES:  # labels or seeded noise: no model runs
        return Rate(0.0, "baseline: no model runs (cost ~0)", "none")
    rate = rates.get(f"{spec}/{kind}") or rates.get(spec) or DEFAULT_RATE
    return rate.for_texts(chars) if kind == "text" else rate


@dataclass(frozen=True)
class Cell:
    """One task x model (or stage) of a run: items embedded, of which cached, the cost."""

    task: str
    model: str
    items: int
    cached: int
    rate: Rate
    note: str = ""
    kind: str = ""

    @property
    def range_seconds(self) -> tuple[float, float]:
        low, high = RANGES.get(self.rate.quality, RANGES["default"])
        seconds = self.to_embed * self.rate.seconds_per_item
        return seconds * low, seconds * high

    @property
    def to_embed(self) -> int:
        return self.items - self.cached

    @property
    def seconds(self) -> float:
        return round(self.to_embed * self.rate.seconds_per_item, 1)

    @property
    def work(self) -> float:
        """Progress weight: seconds to embed the rest plus reading what is cached."""
        return self.to_embed * self.rate.seconds_per_item + self.cached * READ_SECONDS_PER_ITEM

    def row(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "model": self.model,
            "kind": self.kind,
            "items": self.items,
            "cached": self.cached,
            "est. seconds": self.seconds,
            "rate": "; ".join(filter(None, [self.note, self.rate.source])),
        }


@dataclass
class Estimate:
    """A run's cost, cell by cell, with the tasks that will be skipped and why."""

    suite: str
    cells: list[Cell]
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def total_seconds(self) -> float:
        return round(sum(cell.seconds for cell in self.cells), 1)

    @property
    def range_seconds(self) -> tuple[float, float]:
        """(low, high) seconds: each cell's estimate widened by how its rate was obtained."""
        spans = [cell.range_seconds for cell in self.cells]
        return round(sum(a for a, _ in spans), 2), round(sum(b for _, b in spans), 2)

    def summary_line(self) -> str:
        """ "about 2 min (50 s to 5 min)": the estimate as a range people can plan with."""
        low, high = self.range_seconds
        if self.total_seconds == 0:
            return "nothing to embed: the cache holds every item"
        return (
            f"about {human_seconds(self.total_seconds)} "
            f"({human_seconds(low)} to {human_seconds(high)})"
        )

    def rows(self) -> list[dict[str, Any]]:
        """The table shown to users: one row per cell, then the total."""
        total = {
            "task": "total",
            "model": "",
            "kind": "",
            "items": sum(cell.items for cell in self.cells),
            "cached": sum(cell.cached for cell in self.cells),
            "est. seconds": self.total_seconds,
            "rate": "",
        }
        return [cell.row() for cell in self.cells] + [total]

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "cells": [{**asdict(cell), "seconds": cell.seconds} for cell in self.cells],
            "total_seconds": self.total_seconds,
            "range_seconds": list(self.range_seconds),
            "skipped": dict(self.skipped),
        }

    def render(self) -> str:
        """A plain-text table (the CLI's `bench run --estimate`)."""
        lines = [f"Estimate for suite {self.suite} (nothing was run):"]
        lines.append(
            f"  {'task':<44} {'model':<24} {'kind':<7} {'items':>7} {'cached':>7} {'est. s':>8}"
        )
        for cell in self.cells:
            lines.append(
                f"  {cell.task:<44} {cell.model:<24} {cell.kind:<7} {cell.items:>7} "
                f"{cell.cached:>7} {cell.seconds:>8.1f}  {cell.row()['rate']}"
            )
        lines.append(f"  {'total':<44} {'':<24} {'':<7} {'':>7} {'':>7} {self.total_seconds:>8.1f}")
        lines.append(f"  {self.summary_line()}")
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)


def human_seconds(seconds: float) -> str:
    """12 s, 3.5 min, 1.2 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def new_vectors_key(spec: str) -> str:
    """The Summary.timing key under which a run records how many vectors a model computed
    (`spec` may be "model/kind" for the vectors of one input kind)."""
    return f"{spec}_new_vectors"


def new_chars_key(spec: str) -> str:
    """The Summary.timing key of the characters of the texts a model embedded anew."""
    return f"{spec}/text_new_chars"


def measured_rate(
    spec: str, history: Iterable[tuple[int | None, Summary]], kind: str | None = None
) -> Rate:
    """Seconds per item of `spec` (for one input `kind` when given) from the newest run (of
    `history`, newest first) in which it computed new vectors. Per kind: the embedding time of
    that kind over its new vectors. Per model: the model's whole time over all the vectors it
    wrote (loading and scoring included, so an upper bound). The default when none measured."""
    key = f"{spec}/{kind}" if kind else spec
    for run_id, summary in history:
        if summary.settings.get("engine") == "ray":  # units ran side by side: no model's rate
            continue
        fresh = summary.timing.get(new_vectors_key(key))
        seconds = summary.timing.get(f"{key}_s")
        if fresh and seconds is not None and fresh > 0:
            rate = float(seconds) / float(fresh)
            where = f"run {run_id}" if run_id is not None else "an earlier run"
            what = f"{kind} " if kind else ""
            chars = summary.timing.get(new_chars_key(spec)) if kind == "text" else None
            return Rate(
                rate,
                f"{rate:.4f} s/{what}item measured in {where} ({int(fresh)} new vectors)",
                "kind" if kind else "model",
                float(seconds) / float(chars) if chars else None,
            )
    return DEFAULT_RATE


def run_history(store: Any, limit: int = 30) -> list[tuple[int | None, Summary]]:
    """The newest finished runs (id, Summary), newest first; unreadable folders are passed."""
    # deferred: psutil, sqlalchemy
    from medheb_app.store.runs import run_listing

    history = []
    for row in run_listing(store, limit=limit, status="finished"):
        try:
            history.append((row["id"], Summary.from_disk(row["out_dir"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return history


def rates_from_store(store: Any, specs: Sequence[str]) -> dict[str, Rate]:
    """Each spec's measured seconds per item (measured_rate) from the store's recent runs,
    keyed "spec" (whole model) and "spec/kind" (per input kind, where measured); a logic:
    spec not measured yet takes its embedder's rates (the same model embeds)."""
    history = run_history(store)
    rates: dict[str, Rate] = {}
    for spec in specs:
        for kind in (None, *KINDS):
            rate = measured_rate(spec, history, kind)
            if rate.quality == "default" and spec.startswith(LOGIC_PREFIX):
                rate = measured_rate(spec[len(LOGIC_PREFIX) :], history, kind)
            if kind is None:
                rates[spec] = rate
            elif rate.quality != "default":
                rates[f"{spec}/{kind}"] = rate
    return rates


def model_cards(settings: Settings) -> dict[str, dict[str, Any]]:
    """spec -> registry card (dict) for every listed model; loads no weights."""
    return {
        str(entry["spec"]): entry["card"]
        for entry in list_models(settings)
        if isinstance(entry.get("card"), dict)
    }


class CacheView:
    """The embedding cache as a run will find it, cell by cell: what is stored now plus what
    earlier cells of the same run embed under the same fingerprint (dual-lite and
    logic:dual-lite share their whole-image vectors; so do two specs of one checkpoint)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.planned: dict[str, set[str]] = {}

    def take(self, fingerprint: str | None, keys: Sequence[str]) -> int:
        """How many of `keys` the cell will find cached; the rest count as embedded by it."""
        if fingerprint is None or not keys:
            return 0
        planned = self.planned.setdefault(fingerprint, set())
        stored = set(self.cache.get(fingerprint, keys)) if self.cache is not None else set()
        found = sum(1 for key in keys if key in stored or key in planned)
        planned.update(keys)
        return found


def medheb_keys(task: Any) -> dict[str, list[str]]:
    """kind -> the distinct cache keys an embedding ranker writes for a task: candidates
    plain, queries with the task instruction (eval/rankers.py EmbeddingRanker)."""
    keys: dict[str, list[str]] = {}
    for entry in task.candidates:
        keys.setdefault(item_kind(entry.item), []).append(cache_key(content_key(entry)))
    for entry in task.queries:
        key = cache_key(content_key(entry), task.instruction or None)
        keys.setdefault(item_kind(entry.item), []).append(key)
    return {kind: list(dict.fromkeys(values)) for kind, values in keys.items()}


def mean_text_chars(task: Any) -> float | None:
    """Mean characters of a task's text inputs as the ranker hands them over (queries with
    the task instruction, candidates plain); None without texts."""
    sizes = [text_chars(e.item) for e in task.candidates if item_kind(e.item) == "text"]
    instruction = task.instruction or None
    sizes += [text_chars(e.item, instruction) for e in task.queries if item_kind(e.item) == "text"]
    return sum(sizes) / len(sizes) if sizes else None


def estimate_medheb(
    suite_name: str,
    tasks: Sequence[Any],
    specs: Sequence[str],
    cards: Mapping[str, Mapping[str, Any]],
    cache: Any,
    rates: Mapping[str, Rate],
    skipped: Mapping[str, str] | None = None,
) -> Estimate:
    """Per task, model and input kind of a MedHEB run: items, cached, seconds."""
    cells: list[Cell] = []
    view = CacheView(cache)
    keys = {task.name: medheb_keys(task) for task in tasks}
    chars = {task.name: mean_text_chars(task) for task in tasks}
    for spec in specs:
        card = cards.get(spec) or {}
        for task in tasks:
            if spec in BASELINES:
                cells.append(Cell(task.name, spec, 0, 0, rate_for(rates, spec, "text")))
                continue
            missing = unread_forms(task, card.get("modalities") or ("text", "2d", "3d"))
            if missing:
                why = f"skipped: does not read {', '.join(sorted(missing))}"
                cells.append(Cell(task.name, spec, 0, 0, Rate(0.0, why, "none")))
                continue
            fingerprint = card.get("fingerprint")
            note = "" if fingerprint else "not a listed model: cache not checked"
            for kind, kind_keys in keys[task.name].items():
                found = view.take(fingerprint, kind_keys)
                rate = rate_for(rates, spec, kind, chars[task.name])
                cells.append(Cell(task.name, spec, len(kind_keys), found, rate, note, kind))
    return Estimate(suite_name, cells, dict(skipped or {}))


def image_keys(studies: Sequence[Any], views: str | None) -> list[str]:
    """Cache keys of the studies' whole images, plus each crop of the view set when given."""
    # deferred: faiss
    from medheb_app.index.catalog import study_content_key

    geometry = VIEW_SETS[views] if views else ()
    keys: list[str] = []
    for study in studies:
        content = study_content_key(study)
        keys.append(content)
        keys += [
            crop_key(content, i, fraction, grid)
            for grid, fraction in geometry
            for i in range(grid * grid)
        ]
    return list(dict.fromkeys(keys))


def estimate_cxr(
    suite: Any,
    gallery: Any,
    train: Sequence[Any],
    specs: Sequence[str],
    settings: Settings,
    cards: Mapping[str, Mapping[str, Any]],
    cache: Any,
    rates: Mapping[str, Rate],
) -> Estimate:
    """Per model of a CXR-Retrieve run, its stages in the order they run: (logic: models
    whose probe is not fit yet) the train images and their crops, then the gallery images
    (with crops for logic:), then the 145 queries."""
    # deferred: pandas
    from medheb_app.tasks.cxr_retrieve import CxrRetrieveTask

    task = CxrRetrieveTask(gallery, paraphrase=suite.paraphrase)
    query_keys = list(dict.fromkeys(cache_key(content_key(q)) for q in task.queries))
    query_chars = sum(text_chars(q.item) for q in task.queries) / max(len(task.queries), 1)
    cells: list[Cell] = []
    view = CacheView(cache)
    for spec in specs:
        logic = spec.startswith(LOGIC_PREFIX)
        base = spec[len(LOGIC_PREFIX) :] if logic else spec
        card = cards.get(base) or {}
        fingerprint = card.get("fingerprint")
        note = "" if fingerprint else "not a listed model: cache not checked"
        image_rate = rate_for(rates, spec, "image")
        views = suite.probe_views if logic and suite.probe_views != "whole" else None
        rate = rate_for(rates, spec, "crop") if views else image_rate
        if logic:
            config = ProbeConfig(views=suite.probe_views)
            probe = probe_file(settings, fingerprint, train, config) if fingerprint else None
            if probe is None or not probe.is_file():
                keys = image_keys(train, views)
                found = view.take(fingerprint, keys)
                what = f"{suite.name}: probe fit ({len(train)} train images)"
                kind = "crop" if views else "image"
                cells.append(Cell(what, spec, len(keys), found, rate, note, kind))
        keys = image_keys(gallery.studies, views)
        what = f"{suite.name}: {len(gallery)} gallery images" + (" + crops" if views else "")
        found = view.take(fingerprint, keys)
        kind = "crop" if views else "image"
        cells.append(Cell(what, spec, len(keys), found, rate, note, kind))
        # logic: rankers encode query texts directly (never cached); others through the cache
        found = 0 if logic else view.take(fingerprint, query_keys)
        what = f"{suite.name}: {len(task.queries)} queries"
        why = "; ".join(filter(None, [note, "encoded each run, never cached" if logic else ""]))
        text_rate = rate_for(rates, spec, "text", query_chars)
        cells.append(Cell(what, spec, len(query_keys), found, text_rate, why, "text"))
    return Estimate(suite.name, cells, {})


CALIBRATION_ITEMS = 4


def samples_by_kind(entries: Iterable[Any], n: int = CALIBRATION_ITEMS) -> dict[str, list[Any]]:
    """Up to `n` items of each input kind among `entries` (objects with `.item`)."""
    found: dict[str, list[Any]] = {}
    for entry in entries:
        items = found.setdefault(item_kind(entry.item), [])
        if len(items) < n:
            items.append(entry.item)
    return found


def calibrate_rates(
    specs: Sequence[str],
    samples: Mapping[str, Sequence[Any]],
    rates: Mapping[str, Rate],
    settings: Settings,
    load: Any = None,
) -> dict[str, Rate]:
    """`rates` plus, for each model never measured, its seconds per item of each kind timed
    on a small calibration batch (one warm-up item first, so the batch times embedding, not
    first-call setup). This loads the model: the first run's estimate is then a measurement
    of this machine, not a 0.3 s/item guess. Baselines and measured models are left alone."""
    import time

    if load is None:
        load = registry.load_embedder
    out = dict(rates)
    for spec in specs:
        base = spec.removeprefix(LOGIC_PREFIX)
        if base in BASELINES or rate_for(out, spec, "text").quality != "default":
            continue
        embedder = load(base, settings)
        for kind, items in samples.items():
            if not items or f"{spec}/{kind}" in out:
                continue
            embedder.encode(list(items[:1]))
            started = time.perf_counter()
            embedder.encode(list(items))
            per_item = (time.perf_counter() - started) / len(items)
            source = f"{per_item:.4f} s/{kind} item timed on {len(items)} calibration items"
            chars = sum(text_chars(item) for item in items) if kind == "text" else 0
            per_char = per_item * len(items) / chars if chars else None
            out[f"{spec}/{kind}"] = Rate(per_item, source, "calibrated", per_char)
    return out


def estimate_run(
    suite: Any,
    specs: Sequence[str],
    settings: Settings,
    rates: Mapping[str, Rate] | None = None,
    only: Sequence[str] | None = None,
    calibrate: bool = False,
) -> Estimate:
    """Build the run's tasks (or gallery) as the run would and estimate it; runs nothing.
    `calibrate` times models never measured on a few items of each kind (calibrate_rates)."""
    # deferred: pandas
    from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite, CxrRetrieveTask

    specs = list(dict.fromkeys(spec.strip() for spec in specs))
    cards = model_cards(settings)
    cache = EmbeddingCache(settings.cache_dir)
    rates = rates or {}
    if isinstance(suite, CxrRetrieveSuite):
        gallery, train = suite.build(settings)
        if calibrate:
            task = CxrRetrieveTask(gallery, paraphrase=suite.paraphrase)
            samples = samples_by_kind([*task.candidates, *task.queries])
            rates = calibrate_rates(specs, samples, rates, settings)
        return estimate_cxr(suite, gallery, train, specs, settings, cards, cache, rates)
    tasks, skipped = suite.build(settings, only=only)
    if calibrate:
        entries = [entry for task in tasks for entry in (*task.candidates, *task.queries)]
        rates = calibrate_rates(specs, samples_by_kind(entries), rates, settings)
    return estimate_medheb(suite.name, tasks, specs, cards, cache, rates, skipped)


# ---------------------------------------------------------------- training runs

TRAINING_CALIBRATION_STEPS = 4  # steps a calibration run times before it stops
TRAINING_CALIBRATION_N = 64  # phantom studies of a calibration run (recipes with `n`)
TRAINING_RANGES = {  # (low, high) multipliers, by where the figure comes from
    "same": (0.7, 1.5),  # an earlier job of this recipe with the same epochs and studies
    "scaled": (0.5, 2.0),  # an earlier job of this recipe, scaled to these epochs and studies
    "calibrated": (0.3, 3.0),  # a few steps of a small calibration run
}


@dataclass(frozen=True)
class TrainingTiming:
    """How a training run spent its time (train.loop.TrainingProgress.timing): seconds before
    the first step (corpus, features, model load), seconds per step, and its planned steps,
    with the recipe settings it ran with."""

    recipe: str
    epochs: int
    n: int | None
    setup_s: float
    step_s: float
    total_steps: int
    source: str
    reusable_s: float = 0.0  # of setup_s: drawing the corpus and caching features


@dataclass(frozen=True)
class TrainingEstimate:
    """A training job's expected seconds, as a range, and where the figure comes from."""

    seconds: float
    quality: str  # a key of TRAINING_RANGES
    source: str
    setup_s: float
    steps: int
    step_s: float

    @property
    def range_seconds(self) -> tuple[float, float]:
        low, high = TRAINING_RANGES[self.quality]
        return round(self.seconds * low, 1), round(self.seconds * high, 1)

    def summary_line(self) -> str:
        low, high = self.range_seconds
        return (
            f"about {human_seconds(self.seconds)} ({human_seconds(low)} to "
            f"{human_seconds(high)}): {self.steps} steps of {self.step_s:.2f} s after "
            f"{human_seconds(self.setup_s)} of setup; {self.source}"
        )


def _scale(planned: int | None, earlier: int | None) -> float:
    """How much a quantity grows from the earlier run's value (1 when either is unknown)."""
    if not planned or not earlier:
        return 1.0
    return float(planned) / float(earlier)


def training_history(jobs: Iterable[Any]) -> list[TrainingTiming]:
    """The training jobs that ended well (JobInfo-like: kind, status "done", params, result)
    whose result records its timing, newest first as given."""
    found = []
    for job in jobs:
        result = getattr(job, "result", None) or {}
        timing = result.get("timing") if isinstance(result, dict) else None
        if getattr(job, "kind", "") != "train" or getattr(job, "status", "") != "done":
            continue
        if not timing or not timing.get("total_steps"):
            continue
        params = getattr(job, "params", {}) or {}
        n = params.get("n")
        found.append(
            TrainingTiming(
                str(params.get("recipe", "")),
                int(params.get("epochs") or 1),
                int(n) if n is not None else None,
                float(timing["setup_s"]),
                float(timing["step_s"]),
                int(timing["total_steps"]),
                f"job {job.id}",
                float(timing.get("reusable_s", 0.0)),
            )
        )
    return found


def estimate_training(
    recipe: str,
    epochs: int,
    n: int | None,
    history: Sequence[TrainingTiming],
    uses_n: bool = True,
) -> TrainingEstimate | None:
    """A training job's seconds from the newest earlier job of the same recipe: its steps
    scaled by epochs x studies (steps per epoch grow with the training split), each at the
    earlier step time (the batch size is the recipe's); its setup as the earlier one's, less
    what that job left on disk when the data is the same (the corpus drawn and the features
    cached: a rerun reads them), else scaled by the studies drawn. None without one."""
    for earlier in history:
        if earlier.recipe != recipe:
            continue
        studies = _scale(n, earlier.n) if uses_n else 1.0
        steps = max(1, round(earlier.total_steps * _scale(epochs, earlier.epochs) * studies))
        same_data = not uses_n or earlier.n == n
        if same_data:
            setup = max(earlier.setup_s - earlier.reusable_s, 0.0)
        else:
            setup = earlier.setup_s * studies
        seconds = round(setup + steps * earlier.step_s, 1)
        same = earlier.epochs == epochs and (not uses_n or earlier.n == n)
        what = "measured in" if same else "scaled from"
        source = f"{what} {earlier.source} ({earlier.epochs} epochs" + (
            f", {earlier.n} studies)" if uses_n and earlier.n else ")"
        )
        if same_data and earlier.reusable_s:
            source += f"; its corpus and features are on disk ({earlier.reusable_s:.0f} s saved)"
        return TrainingEstimate(
            seconds, "same" if same else "scaled", source, round(setup, 1), steps, earlier.step_s
        )
    return None


def _timed_steps(recipe: Any, overrides: dict[str, int], settings: Settings, steps: int) -> dict:
    """TrainingProgress.timing() of `recipe` run with `overrides` for `steps` steps into a
    temporary folder, then stopped (the trainer stops between batches; nothing is kept)."""
    import tempfile
    import threading

    config = config_from_sources(recipe.config_class(), overrides=overrides)
    stop = threading.Event()

    def progress(fraction: float, message: str = "") -> None:
        if watch.steps >= steps:
            stop.set()

    watch = TrainingProgress(progress, lambda line: None)
    # stopped by the calibration itself, as intended, whether the trainer returns or raises
    with (
        tempfile.TemporaryDirectory(prefix="medheb-train-calibration-") as out,
        contextlib.suppress(InterruptedError),
    ):
        recipe.run(config, Path(out), settings, watch, stop)
    timing = watch.timing()
    if not timing:
        raise ValueError(f"The {recipe.name} recipe took no step in its calibration run.")
    return timing


def calibrate_training(
    recipe: Any,
    epochs: int,
    n: int | None,
    settings: Settings,
    steps: int = TRAINING_CALIBRATION_STEPS,
) -> TrainingEstimate:
    """A training job's seconds when no earlier job of its recipe was timed: the recipe runs a
    few `steps` (of two epochs) into a temporary folder and stops (nothing is saved or
    registered), and its setup and step times are scaled to the planned job. A recipe that
    draws `n` studies runs twice, one step on TRAINING_CALIBRATION_N / 4 studies and up to
    `steps` steps of two epochs on TRAINING_CALIBRATION_N, so its setup splits into a fixed
    part (loading models) and a part per study (drawing the corpus, caching its features),
    and its steps per epoch into a rate per study. This loads the recipe's models: seconds
    to minutes of work."""
    if "n" not in recipe.job_fields or not n:
        timing = _timed_steps(recipe, {"epochs": 2}, settings, steps)
        total = max(1, round(timing["total_steps"] / 2 * epochs))
        seconds = round(timing["setup_s"] + total * timing["step_s"], 1)
        source = f"timed on a {steps}-step calibration run"
        return TrainingEstimate(
            seconds, "calibrated", source, timing["setup_s"], total, timing["step_s"]
        )
    small, large = TRAINING_CALIBRATION_N // 4, TRAINING_CALIBRATION_N
    first = _timed_steps(recipe, {"epochs": 1, "n": small}, settings, 1)
    # two epochs: a small corpus may be one batch, and a step's time needs two steps
    second = _timed_steps(recipe, {"epochs": 2, "n": large}, settings, steps)
    step_s = second["step_s"]  # the small run may have one step only: its setup is the rest
    small_setup = max(first["first_step_s"] - step_s, 0.0)
    per_study = max((second["setup_s"] - small_setup) / (large - small), 0.0)
    fixed = max(second["setup_s"] - per_study * large, 0.0)
    setup = round(fixed + per_study * int(n), 1)
    total = max(1, round(second["total_steps"] / 2 * epochs * int(n) / large))
    seconds = round(setup + total * step_s, 1)
    source = (
        f"timed on {steps}-step calibration runs of {small} and {large} studies "
        f"({fixed:.0f} s fixed + {per_study:.2f} s per study of setup)"
    )
    return TrainingEstimate(seconds, "calibrated", source, setup, total, step_s)


def training_estimate(
    recipe_name: str,
    epochs: int,
    n: int | None,
    jobs: Iterable[Any],
    settings: Settings,
    calibrate: bool = True,
) -> TrainingEstimate | None:
    """The estimate the admin panel shows before a training job starts: from the newest
    earlier job of the recipe (training_history of `jobs`), else from calibration runs
    (calibrate_training; None with calibrate=False)."""

    recipe = get_recipe(recipe_name)
    uses_n = "n" in recipe.job_fields
    found = estimate_training(recipe.name, epochs, n, training_history(jobs), uses_n)
    if found is not None or not calibrate:
        return found
    return calibrate_training(recipe, epochs, n if uses_n else None, settings)
