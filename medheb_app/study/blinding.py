"""Which benchmark runs must stay blinded, recognised by what they contain (issue 18 item 8).

While a study is open, a non-admin must not read the per-query ranked lists of any run that
holds the lists its items show: side A's top-3 next to the models' lists names the model
before the vote. A stored source path is not enough (the shipped demo study had none, and a
re-run of the same models into another folder has another path), so a run is blinded when,
for some compared item of an open study, one of the run's models ranked that item's task and
query with a top-3 sharing at least MATCH_IDS of the ids of either side's top-3, in any order
(a re-run whose ties broke differently still matches; a false match only hides a run from
non-admins, which is the safe side). Gold items are left out: their lists are not model
outputs.

`blinded_fingerprints(store)` reads the open studies' compared items (always current: a study
closed or reopened counts at once); `run_is_blinded(store, run_dir)` reads the run's per-task
files (cached by file size and modification time), so after the first call a drill-down
costs one query of the study items and a set intersection per task file.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from sqlalchemy import select

from medheb_app.store.db import Store
from medheb_app.store.study_tables import PreferenceStudy, StudyItem

TOP_K = 3
MATCH_IDS = 2  # shared ids of a top-3 that make two lists "the same list"
Fingerprint = tuple[str, str, tuple[str, ...]]  # (task, query id, top-3 ids)

_lock = threading.Lock()
_file_cache: dict[str, tuple[tuple[int, int], frozenset[Fingerprint]]] = {}


def _ids(entries: list[dict]) -> tuple[str, ...]:
    return tuple(str(entry.get("id")) for entry in entries[:TOP_K])


def blinded_fingerprints(store: Store) -> frozenset[Fingerprint]:
    """(task, query id, top-3) of both sides of every compared item of every open study."""
    with store.session() as session:
        rows = session.execute(
            select(StudyItem.task, StudyItem.query_id, StudyItem.top_a, StudyItem.top_b)
            .join(PreferenceStudy, PreferenceStudy.id == StudyItem.study_id)
            .where(
                PreferenceStudy.closed_at.is_(None),
                StudyItem.is_gold.is_(False),
                StudyItem.withdrawn_at.is_(None),
            )
        ).all()
    prints = frozenset(
        (str(task), str(qid), _ids(side))
        for task, qid, top_a, top_b in rows
        for side in (top_a, top_b)
    )
    return prints


def _file_prints(path: Path) -> frozenset[Fingerprint]:
    """(task, query id, top-3) of every query in one DIR/<model>/<task>.json (cached)."""
    stat = path.stat()
    stamp = (stat.st_size, stat.st_mtime_ns)
    with _lock:
        cached = _file_cache.get(str(path))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return frozenset()
    if not isinstance(data, dict) or not isinstance(data.get("queries"), list):
        return frozenset()
    meta = data.get("metadata") or data.get("task") or {}
    task = str(meta.get("name") if isinstance(meta, dict) and meta.get("name") else path.stem)
    prints = set()
    for record in data["queries"]:
        if not isinstance(record, dict) or "id" not in record:
            continue
        ranked = record.get("ranked") or []
        top = tuple(str(r.get("id")) if isinstance(r, dict) else str(r) for r in ranked[:TOP_K])
        prints.add((task, str(record["id"]), top))
    result = frozenset(prints)
    with _lock:
        _file_cache[str(path)] = (stamp, result)
    return result


def run_is_blinded(store: Store, run_dir: str | Path | None) -> bool:
    """True when the run folder holds a ranked list an open study's item shows (any model,
    any folder name: the content decides). An unreadable or missing folder is not blinded
    (there is nothing to show from it)."""
    if run_dir is None:
        return False
    prints = blinded_fingerprints(store)
    if not prints:
        return False
    root = Path(run_dir)
    try:
        model_dirs = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return False
    shown: dict[tuple[str, str], list[frozenset[str]]] = {}
    for task, qid, top in prints:
        shown.setdefault((task, qid), []).append(frozenset(top))
    for model_dir in model_dirs:
        for path in model_dir.glob("*.json"):
            for task, qid, top in _file_prints(path):
                sides = shown.get((task, qid))
                if sides and any(len(side & set(top)) >= MATCH_IDS for side in sides):
                    return True
    return False
