"""The explorer's leaderboard tables as data frames, from a run Summary.

Task-macro averages over the tasks that pass the explorer's filters (family, form, split,
model), as MedHEB's ID / held-out / all columns are (Table 4), with 95% bootstrap CIs; and a
CXR-Retrieve run's leaderboard and per-finding table. The UI renders these frames only.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from medheb_app.eval import reports
from medheb_app.eval.cxr_tables import finding_table_rows, leaderboard_rows
from medheb_app.eval.results import Summary

METRICS = ("hit@1", "mrr@5", "hit@5")


def task_frame(summary: Summary) -> pd.DataFrame:
    """One row per (model, task): the task's family, form, split and scores in percent."""
    forms = {task["name"]: task.get("form", "") for task in summary.tasks}
    rows = []
    for model, block in summary.models.items():
        for task, scores in block.tasks.items():
            rows.append(
                {
                    "model": model,
                    "task": task,
                    "family": scores["family"],
                    "form": forms.get(task, ""),
                    "split": scores["split"],
                    "graded": bool(scores["graded"]),
                    **{m: scores.get(m) for m in (*METRICS, "ndcg@5")},
                }
            )
    columns = ["model", "task", "family", "form", "split", "graded", *METRICS, "ndcg@5"]
    return pd.DataFrame(rows, columns=columns)


def filter_frame(
    frame: pd.DataFrame,
    families: list[str] | None = None,
    forms: list[str] | None = None,
    splits: list[str] | None = None,
    models: list[str] | None = None,
) -> pd.DataFrame:
    """Rows whose family, form, split and model are among the chosen (empty = all)."""
    mask = pd.Series(True, index=frame.index)
    for column, chosen in (
        ("family", families),
        ("form", forms),
        ("split", splits),
        ("model", models),
    ):
        if chosen:
            mask &= frame[column].isin(chosen)
    return frame[mask]


def leaderboard_with_ci(summary: Summary, frame: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard with each model's 95% bootstrap CI of Hit@1 (queries resampled within
    each task shown); the baselines last, named as floor and ceiling."""
    board = leaderboard(frame)
    if board.empty:
        return board
    single = frame[~frame["graded"]]
    cis = []
    for name in board["model"]:
        tasks = list(single[single["model"] == name]["task"])
        ci = reports.hit1_ci(summary, name, tasks)
        cis.append(f"[{ci[1]:.1f}, {ci[2]:.1f}]" if ci else reports.DASH)
    board.insert(2, "Hit@1 95% CI", cis)
    roles = {"random": "floor", "oracle": "ceiling"}
    board["model"] = [f"{m} ({roles[m]})" if m in roles else m for m in board["model"]]
    last = board["model"].str.endswith(("(floor)", "(ceiling)"))
    return pd.concat([board[~last], board[last]]).reset_index(drop=True)


def cxr_leaderboard(summary: Summary) -> pd.DataFrame:
    """A CXR-Retrieve run's models: P@1 / P@5 per regime, HNRR@5, negation P@5 CI."""
    return pd.DataFrame(leaderboard_rows([summary.cxr_report(m) for m in summary.models]))


def cxr_finding_table(summary: Summary) -> list[dict[str, Any]]:
    """The per-finding table of a CXR-Retrieve run (every model)."""
    return finding_table_rows([summary.cxr_report(m) for m in summary.models])


def leaderboard(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model: task-macro Hit@1, MRR@5, Hit@5 over the single-positive tasks shown."""
    single = frame[~frame["graded"]]
    if single.empty:
        return pd.DataFrame(columns=["model", *METRICS, "tasks"])
    board = single.groupby("model")[list(METRICS)].mean().round(2)
    board["tasks"] = single.groupby("model")["task"].count()
    return board.sort_values("hit@1", ascending=False).reset_index()
