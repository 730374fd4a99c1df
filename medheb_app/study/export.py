"""Votes as a table: one row per vote with what was shown and what the item hid.

This is the admin's view (and the CSV the `study export` command writes): it joins the
append-only vote log with the items' secrets, turns the on-screen choice (A = left, B = right)
into the outcome for the canonical pair (a = model_a, b = model_b), and drops votes that an
"undo" row retracted unless asked to keep them. `rater` is the rater's id (unique: display
names are only labels and may repeat), `rater_name` the label; `gold` marks quality-control
items (outcome "a" = the rater chose the reference list); `seconds` runs from the claim of the
item to the vote; `revealed` says the model names were shown after it; `reason` is why a
"cannot_judge" vote could not judge, `comment` the rater's free text and
`clinically_significant` their flag (empty when not given).

The CSV is written for spreadsheets: every cell that starts with =, +, -, @, a tab or a
carriage return is prefixed with a single quote, so a rater name such as =HYPERLINK(...) is
shown as text, never run as a formula (OWASP "CSV injection").
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from sqlalchemy import select

from medheb_app.store.db import Store
from medheb_app.store.study_tables import Assignment, PreferenceStudy, Rater, StudyItem, Vote
from medheb_app.study.analysis import model_votes
from medheb_app.study.errors import StudyError
from medheb_app.study.items import find_study
from medheb_app.study.mrmc import mrmc_input

COLUMNS = [
    "study",
    "vote_id",
    "item",
    "rater",
    "rater_name",
    "client",
    "gold",
    "task",
    "family",
    "split",
    "query_id",
    "model_a",
    "model_b",
    "model_left",
    "model_right",
    "choice",
    "outcome",
    "winner",
    "hit_a",
    "hit_b",
    "stratum",
    "voted_at",
    "seconds",
    "revealed",
    "retracted",
    "reason",
    "comment",
    "clinically_significant",
]
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def stratum(hit_a: bool, hit_b: bool) -> str:
    """Top-1 correctness of the pair (MedHEB Figure 7)."""
    if hit_a and hit_b:
        return "both_hit"
    if hit_a:
        return "only_a"
    if hit_b:
        return "only_b"
    return "neither"


def outcome(choice: str, model_left: str, model_a: str) -> str:
    """The on-screen choice as the canonical outcome: a, b, tie, both_poor or cannot_judge."""
    if choice not in ("A", "B"):
        return choice
    left_is_a = model_left == model_a
    return "a" if (choice == "A") == left_is_a else "b"


def enrolment_client(key: str | None, rater_id: int, seen: dict[str, str]) -> str:
    """The rater's enrolment client as a label that names no address: raters who joined an
    open-enrolment study from one client address share "client-N" (numbered in vote order),
    every other rater is a client of their own ("rater-ID"). One person can enrol twice from
    one browser, so the analysis counts such raters apart and merged (study.analysis)."""
    if not key:
        return f"rater-{rater_id}"
    return seen.setdefault(key, f"client-{len(seen) + 1}")


def votes_frame(
    store: Store, study: int | str | None = None, include_retracted: bool = False
) -> pd.DataFrame:
    """Every vote (of one study, or all) joined with its item; columns as in COLUMNS."""
    study_id = find_study(store, study).id if study is not None else None
    query = (
        select(Vote, StudyItem, Rater, PreferenceStudy.name, Assignment.created_at)
        .join(StudyItem, StudyItem.id == Vote.item_id)
        .join(Rater, Rater.id == Vote.rater_id)
        .join(Assignment, Assignment.id == Vote.assignment_id)
        .join(PreferenceStudy, PreferenceStudy.id == Vote.study_id)
        .order_by(Vote.id)
    )
    undo_query = select(Vote.retracts).where(Vote.kind == "undo")
    reveal_query = select(Vote.retracts).where(Vote.kind == "reveal")
    if study_id is not None:
        query = query.where(Vote.study_id == study_id)
        undo_query = undo_query.where(Vote.study_id == study_id)
        reveal_query = reveal_query.where(Vote.study_id == study_id)
    with store.session() as session:
        retracted = set(session.scalars(undo_query).all())
        revealed = set(session.scalars(reveal_query).all())
        rows = []
        clients: dict[str, str] = {}
        for vote, item, rater, study_name, claimed_at in session.execute(query).all():
            if vote.kind != "vote" or (vote.id in retracted and not include_retracted):
                continue
            result = outcome(vote.choice, vote.model_left, item.model_a)
            winner = {"a": item.model_a, "b": item.model_b}.get(result, result)
            rows.append(
                {
                    "study": study_name,
                    "vote_id": vote.id,
                    "item": item.id,
                    "rater": rater.id,
                    "rater_name": rater.display_name or rater.name,
                    "client": enrolment_client(rater.enrol_key, rater.id, clients),
                    "gold": bool(item.is_gold),
                    "task": item.task,
                    "family": item.family,
                    "split": item.split,
                    "query_id": item.query_id,
                    "model_a": item.model_a,
                    "model_b": item.model_b,
                    "model_left": vote.model_left,
                    "model_right": vote.model_right,
                    "choice": vote.choice,
                    "outcome": result,
                    "winner": winner,
                    "hit_a": item.hit_a,
                    "hit_b": item.hit_b,
                    "stratum": stratum(item.hit_a, item.hit_b),
                    "voted_at": vote.created_at.isoformat(timespec="seconds"),
                    "seconds": round((vote.created_at - claimed_at).total_seconds(), 3),
                    "revealed": vote.id in revealed,
                    "retracted": vote.id in retracted,
                    "reason": vote.reason or "",
                    "comment": vote.comment or "",
                    "clinically_significant": vote.significant,
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def csv_text(frame: pd.DataFrame) -> str:
    """A table as spreadsheet-safe CSV text: formulas neutralised, RFC 4180 line ends (so a
    cell holding a carriage return is quoted, not a row break)."""
    return neutralise_formulas(frame).to_csv(index=False, lineterminator="\r\n")


def export_csv(store: Store, out: str | Path, study: int | str | None = None) -> int:
    """Write the votes in force to a CSV file; returns the number of rows written."""
    out = Path(out)
    if out.is_dir():
        raise StudyError(f"{out} is a folder; give a file name such as {out / 'votes.csv'}.")
    frame = votes_frame(store, study)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(csv_text(frame), newline="")
    return len(frame)


def neutralise_cell(value: object) -> object:
    """A text cell a spreadsheet would run as a formula, quoted with a leading apostrophe."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def neutralise_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of `frame` with every formula-like text cell (and column name) neutralised."""
    safe = frame.copy()
    for column in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[column]):  # text of any dtype; bools skip
            safe[column] = safe[column].astype(object).map(neutralise_cell)
    safe.columns = [neutralise_cell(str(column)) for column in safe.columns]
    return safe


def export_mrmc(
    store: Store, out: str | Path, study: int | str | None = None, ties: str = "half"
) -> int:
    """Write the MRMC input table (reader, case, modality, score, truth, pair; study.mrmc) of
    the compared (non-gold) votes in force; returns the number of rows written."""
    out = Path(out)
    if out.is_dir():
        raise StudyError(f"{out} is a folder; give a file name such as {out / 'mrmc.csv'}.")
    votes = votes_frame(store, study)
    frame = mrmc_input(model_votes(votes), ties)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(csv_text(frame), newline="")
    return len(frame)
