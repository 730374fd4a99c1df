"""The blinded preference study of MedHEB section 5.6: build items from benchmark runs, serve
them to raters blind, record votes, analyse and export.

Service functions the UI and CLI call:
- items:    create_study, list_studies, find_study, withdraw_items
- run_outputs / payloads: load_run, describe_with_tasks (display payloads from the tasks)
- session:  sign_in, next_item, record_vote, undo_last_vote, progress
- export:   votes_frame, export_csv
- analysis: preference_rates, bradley_terry, rater_agreement, position_bias, summarise,
            stratum_figure
"""

from medheb_app.study.errors import ItemGoneError, StudyError
from medheb_app.study.items import create_study, find_study, list_studies, withdraw_items
from medheb_app.study.payloads import describe_with_tasks
from medheb_app.study.run_outputs import load_run
from medheb_app.study.session import (
    CHOICES,
    ItemView,
    RaterInfo,
    VoteReceipt,
    next_item,
    progress,
    record_vote,
    sign_in,
    undo_last_vote,
)

__all__ = [
    "CHOICES",
    "ItemGoneError",
    "ItemView",
    "RaterInfo",
    "StudyError",
    "VoteReceipt",
    "create_study",
    "describe_with_tasks",
    "find_study",
    "list_studies",
    "load_run",
    "next_item",
    "progress",
    "record_vote",
    "sign_in",
    "undo_last_vote",
    "withdraw_items",
]
