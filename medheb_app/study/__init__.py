"""The blinded preference study of MedHEB section 5.6: build items from benchmark runs, serve
them to raters blind, record votes, analyse and export.

Public API (the UI and the CLI call only these; every error is a StudyError whose message is
meant for the person who caused it):

Admin (never expose to raters; the UI checks admin rights before calling):
- create_study(store, name, models, run_dir_or_outputs, n_items, raters_per_item=1,
      reveal_after_vote=False, seed=0, describe=None, *, public_title="", open_enrolment=False,
      gold_share=0.0, claim_timeout_s=600) -> StudyCreated(id, n_items, n_gold, withheld)
  `describe`: payloads.describe_with_tasks(tasks, media_dir) (a Renderer); withheld lists
  {"task", "query_id", "reason"} of queries that could not be rendered (never shown).
- list_studies(store) -> [dict]  (internal name, models, counts, settings)
- find_study(store, id_or_name), withdraw_items(store, study_id, positions=None),
  close_study(store, study, closed=True)
- create_invitations(store, study_id, n, label="") -> [Invitation(id, secret, code, label)]
  (.link == "/rate?invite=<secret>"; secret and code exist in clear only in this return value)
- list_invitations(store, study_id) -> [InvitationInfo(id, study_id, label, created_at,
      revoked, used, rater_id, display_name)]
- revoke_invitation(store, invitation_id) -> InvitationInfo
- export.votes_frame(store, study=None), export.export_csv(store, out, study=None)
- analysis.summarise(votes, n_boot, seed, min_gold_accuracy=None), analysis.rater_quality,
  analysis.exclude_raters, preference_rates, bradley_terry, rater_agreement, position_bias,
  stratum_figure

Rater-facing (return nothing that names a model, task, gold or internal study name before
that item's vote):
- list_open_studies(store) -> [PublicStudy(id, title, open_enrolment)]
- sign_in_with_invitation(store, secret_or_code, display_name="") -> RaterSession(rater_id,
      study_id, display_name, resume_secret)   (same invitation -> same rater)
- sign_in_open(store, study_id, display_name) -> RaterSession  (open-enrolment studies only;
      always a fresh rater)
- resume(store, resume_secret) -> RaterSession | None   (the HTTP-only cookie's value)
- next_item(store, study_id, rater_id) -> ItemView(token, query, side_a, side_b, done, total)
      | None   (payload schema: see payloads.py; None: nothing for this rater now,
      progress() tells whether the study is complete)
- record_vote(store, item_token, rater_id, choice in CHOICES) -> VoteReceipt(vote_id, choice,
      can_reveal, done, total)   (ItemGoneError: load the next item)
- reveal(store, item_token, rater_id) -> {"A": name, "B": name}  (after a vote; makes it final)
- undo_last_vote(store, study_id, rater_id) -> token of the re-opened item
- progress(store, study_id, rater_id=None) -> {"study_done", "study_total", "done", "total"}
"""

from medheb_app.study.errors import ItemGoneError, StudyError
from medheb_app.study.identity import (
    Invitation,
    InvitationInfo,
    RaterSession,
    create_invitations,
    list_invitations,
    resume,
    revoke_invitation,
    sign_in_open,
    sign_in_with_invitation,
)
from medheb_app.study.items import (
    PublicStudy,
    StudyCreated,
    close_study,
    create_study,
    find_study,
    list_open_studies,
    list_studies,
    withdraw_items,
)
from medheb_app.study.payloads import Renderer, Unrenderable, describe_with_tasks, render_check
from medheb_app.study.run_outputs import load_run
from medheb_app.study.session import (
    CHOICES,
    ItemView,
    VoteReceipt,
    next_item,
    progress,
    record_vote,
    reveal,
    undo_last_vote,
)

__all__ = [
    "CHOICES",
    "Invitation",
    "InvitationInfo",
    "ItemGoneError",
    "ItemView",
    "PublicStudy",
    "RaterSession",
    "Renderer",
    "StudyCreated",
    "StudyError",
    "Unrenderable",
    "VoteReceipt",
    "close_study",
    "create_invitations",
    "create_study",
    "describe_with_tasks",
    "find_study",
    "list_invitations",
    "list_open_studies",
    "list_studies",
    "load_run",
    "next_item",
    "progress",
    "record_vote",
    "render_check",
    "resume",
    "reveal",
    "revoke_invitation",
    "sign_in_open",
    "sign_in_with_invitation",
    "undo_last_vote",
    "withdraw_items",
]
