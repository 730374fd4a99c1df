"""The runner on small hand-built tasks: oracle, random, a tiny real embedder and the cache."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from medheb_app.eval.rankers import EmbeddingRanker, OracleRanker, RandomRanker
from medheb_app.eval.results import Summary, TaskRun
from medheb_app.eval.runner import evaluate_task, rank, run_suite
from medheb_app.evidence.study import EmbedItem, Evidence, Study, as_evidence
from medheb_app.index.cache import EmbeddingCache
from medheb_app.models.base import ModelCard, l2_normalise
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.store.runs import list_runs, results_of
from medheb_app.tasks.base import Item, Query, Task, TaskMetadata
from medheb_app.tasks.builders.generic import graded_task, paired_task

WORDS = [f"w{i}" for i in range(40)]


class BagOfWords:
    """A tiny deterministic text embedder (hashed word counts) that counts its calls."""

    def __init__(self) -> None:
        self.card = ModelCard(name="bow", version="1", dims=64, modalities=("text",), license="MIT")
        self.encoded = 0

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        self.encoded += len(items)
        out = np.zeros((len(items), self.card.dims), dtype=np.float32)
        for row, item in enumerate(items):
            for word in (as_evidence(item).text or "").split():
                out[row, sum(map(ord, word)) % self.card.dims] += 1.0
        return l2_normalise(out)


def meta(name: str, family: str = "T-T", **extra) -> TaskMetadata:
    return TaskMetadata(
        name=name,
        family=family,
        form="text",
        split=extra.pop("split", "ID"),
        anatomy="chest",
        source="unit",
        qry_inst="Find the matching passage:",
        **extra,
    )


def text_pairs(n: int, seed: int) -> list[tuple[Item, Item]]:
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS, size=4, replace=False))
        pairs.append((Item(f"q{i}", words), Item(f"t{i}", words + " target")))
    return pairs


def test_rank_excludes_and_breaks_ties_in_pool_order() -> None:
    task = Task(
        meta("tie"),
        [Query("a", "x", positives=("b",), exclude=frozenset({"a"}))],
        [Item("a", "x"), Item("b", "y"), Item("c", "z")],
    )
    order = rank(np.array([[5.0, 1.0, 1.0]]), task, k=10)
    assert order == [[1, 2]]  # a excluded, b before c on the tie


def test_oracle_is_perfect_and_random_is_near_chance() -> None:
    task = paired_task(meta("pairs"), text_pairs(200, 0))
    oracle = evaluate_task(task, OracleRanker())
    assert oracle.scores["hit@1"] == 1.0
    assert oracle.scores["mrr@5"] == 1.0
    assert "upper bound" in oracle.note
    chance = evaluate_task(task, RandomRanker(seed=1))
    # one positive in 200 candidates: chance Hit@5 is 5/200 = 2.5%
    assert chance.scores["hit@5"] < 0.1
    assert len(chance.queries[0]["ranked"]) == 10
    assert chance.queries[0]["positives"] == [task.queries[0].positives[0]]


def test_graded_oracle_puts_highest_gain_first() -> None:
    items = [Item(f"i{n}", f"w{n}") for n in range(8)]
    level = {f"i{n}": n % 3 for n in range(8)}

    def gain(q: str, c: str) -> float:
        return 1.0 if level[q] == level[c] else (0.5 if abs(level[q] - level[c]) == 1 else 0.0)

    task = graded_task(
        meta("graded", family="I-I", main_metric="ndcg@5", graded=True, relation="severity"),
        items,
        items,
        gain,
    )
    oracle = evaluate_task(task, OracleRanker())
    assert oracle.scores["ndcg@5"] == pytest.approx(1.0)
    first = oracle.queries[0]
    assert first["gains"][first["ranked"][0]] == 1.0
    assert first["id"] not in first["ranked"]


def test_embedding_ranker_scores_and_the_cache_saves_rework(tmp_path: Path) -> None:
    task = paired_task(meta("bow-pairs"), text_pairs(60, 2))
    model = BagOfWords()
    cache = EmbeddingCache(tmp_path / "cache")
    first = evaluate_task(task, EmbeddingRanker("bow", model, cache))
    assert first.scores["hit@1"] > 0.5  # words shared with the target dominate
    assert model.encoded == 120
    second = evaluate_task(task, EmbeddingRanker("bow", model, cache))
    assert model.encoded == 120  # everything came from the cache
    assert second.queries == first.queries


def test_run_suite_writes_files_summary_report_and_store(settings, tmp_path: Path) -> None:
    tasks = [
        paired_task(meta("tt-a"), text_pairs(30, 3)),
        paired_task(meta("vg-a", family="VG", split="held-out-source"), text_pairs(20, 4)),
    ]
    out = tmp_path / "run"
    events: list[tuple[float, str]] = []
    summary = run_suite(
        tasks, ["random", "oracle"], out, settings, progress=lambda f, m: events.append((f, m))
    )
    assert (out / "summary.json").exists() and (out / "report.md").exists()
    per_task = TaskRun.from_disk(out / "oracle" / "tt-a.json")
    assert per_task.scores["hit@1"] == 1.0
    assert json.loads((out / "random" / "vg-a.json").read_text())["queries"][0]["ranked"]
    loaded = Summary.from_disk(out)
    assert loaded.models["oracle"].splits["all"]["hit@1"] == 100.0
    assert loaded.models["oracle"].consistency["cv"] == 0.0
    assert set(loaded.models["random"].families) == {"T-T", "VG"}
    assert events[-1][0] == 1.0
    report = (out / "report.md").read_text()
    assert "Table 4" in report and "100.00 (100.00)" in report
    store = Store.open(settings.database_url)
    run = list_runs(store)[0]
    assert run.status == "finished" and run.id == summary.run_id
    assert {(r.model, r.task) for r in results_of(store, run.id)} == {
        (m, t) for m in ("random", "oracle") for t in ("tt-a", "vg-a")
    }


def test_run_suite_cancel_marks_the_run(settings, tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        run_suite(
            [paired_task(meta("tt-b"), text_pairs(5, 5))], ["random"], tmp_path, settings, stop=stop
        )
    assert list_runs(Store.open(settings.database_url))[0].status == "cancelled"


def test_model_that_cannot_read_a_form_skips_the_task(settings, tmp_path: Path) -> None:
    image_task = Task(
        meta("img", family="I-Lab"),
        [Query("q", Evidence(image=np.zeros((4, 4), np.float32)), positives=("t",))],
        [Item("t", "text")],
    )
    text_task = paired_task(meta("tt-c"), text_pairs(10, 6))
    ranker = EmbeddingRanker("bow", BagOfWords(), None)
    summary = run_suite([image_task, text_task], [ranker], tmp_path, settings, record=False)
    assert summary.skipped == {"bow/img": "bow does not read 2d evidence"}
    assert set(summary.models["bow"].tasks) == {"tt-c"}
    assert not (tmp_path / "bow" / "img.json").exists()


def test_task_validation_rejects_unreachable_positives() -> None:
    with pytest.raises(ValueError, match="not in the candidate pool"):
        Task(meta("bad"), [Query("q", "x", positives=("missing",))], [Item("t", "y")])
    with pytest.raises(ValueError, match="no reachable"):
        Task(
            meta("bad2"),
            [Query("q", "x", positives=("q",), exclude=frozenset({"q"}))],
            [Item("q", "x")],
        )
    with pytest.raises(ValueError):
        TaskMetadata(**{**meta("x").model_dump(), "unknown_field": 1})
    with pytest.raises(ValueError):
        meta("x", family="I-X")


def test_task_files_carry_what_a_rater_is_shown(settings, tmp_path: Path) -> None:
    study = Study(id="s1", form="2d", path="/data/s1.png")
    task = Task(
        meta("shown"),
        [Query("q", Evidence(image=np.zeros((4, 4), np.float32), text="Is there edema?"),
               positives=("yes",))],
        [Item("yes", "yes"), Item("img", study)],
    )  # fmt: skip
    run = evaluate_task(task, OracleRanker())
    query = run.queries[0]["query"]
    assert {k: query[k] for k in ("form", "text")} == {"form": "text+2d", "text": "Is there edema?"}
    assert query["thumbnail"].startswith("data:image/png;base64,")  # in-memory image kept small
    assert run.payloads == {"yes": {"text": "yes"}, "img": {"form": "2d", "image": "/data/s1.png"}}
    from medheb_app.study.run_outputs import load_task_output

    path = run.to_disk(tmp_path)
    loaded = load_task_output(path)
    assert loaded.queries["q"].gold == frozenset({"yes"})


def test_run_suite_records_in_postgresql(postgres_url, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DATABASE_URL", postgres_url)
    settings = Settings.from_env()
    summary = run_suite(
        [paired_task(meta("tt-pg"), text_pairs(12, 3))], ["oracle"], tmp_path / "run", settings
    )
    store = Store.open(postgres_url)
    run = list_runs(store)[0]
    assert run.status == "finished" and run.id == summary.run_id
    assert [(r.model, r.task) for r in results_of(store, run.id)] == [("oracle", "tt-pg")]
