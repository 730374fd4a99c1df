"""Admin panel: background jobs (benchmark runs, training, index builds) and study creation.

Built only when ADMIN_PASSWORD is set. The password is typed into a plain HTML form served by
/auth/admin (medheb_app.ui.server), never into a Gradio component, so no component value, state
snapshot or deep link can hold it. Signing in sets a signed HTTP-only cookie; every handler
here reads it from its gr.Request before acting, so a client reusing the admin's session hash
has no rights. Job progress and logs are polled with a gr.Timer while the panel is open.
"""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr
import pandas as pd

from medheb_app.access.auth import Authenticator
from medheb_app.run_service import SKIPPED_COLUMNS, bench_estimate, job_skipped, shared_data_line
from medheb_app.services import INDEX_CORPORA, JOB_FACTORIES, Services, describe_for_run
from medheb_app.tasks.base import FAMILIES
from medheb_app.train.recipes import RECIPES
from medheb_app.ui import components as ui

log = logging.getLogger(__name__)
NOT_ADMIN = "Sign in as admin first."
LOG_LINES_SHOWN = 200
TRAIN_RECIPES = tuple(RECIPES)  # the one recipe registry (medheb_app.train.recipes)
OPTIONAL_PARAMS = ("tasks", "families")  # empty: the whole suite


SIGNED_OUT_NOTE = (
    '<div class="medheb-notice medheb-info" role="status"><a href="/auth/admin" '
    'id="admin-sign-in-link">Sign in as admin</a> to run jobs and create studies.</div>'
)
SIGNED_IN_NOTE = (
    '<div class="medheb-notice medheb-info" role="status">Signed in as admin · '
    '<a href="/auth/signout" id="admin-sign-out">Sign out</a></div>'
)


def start_job(services: Services, is_admin: bool, kind: str, params: dict[str, Any]):
    """Submit a job of `kind`; returns (job id or None, message). Refused unless admin."""
    if not is_admin:
        return None, ui.notice_html("error", NOT_ADMIN)
    if kind not in JOB_FACTORIES:
        return None, ui.notice_html("error", f"Unknown job kind {kind!r}.")
    missing = [
        key
        for key, value in params.items()
        if value in (None, "", []) and key not in OPTIONAL_PARAMS
    ]
    if missing:
        return None, ui.notice_html("error", f"Fill in: {', '.join(missing)}.")
    job_id = services.jobs.submit(kind, params, JOB_FACTORIES[kind](services.settings))
    return job_id, ui.notice_html("info", f"Started job {job_id} ({kind}).")


def job_table(services: Services, limit: int = 30) -> pd.DataFrame:
    rows = [
        {
            "id": job.id,
            "kind": job.kind,
            "status": job.status,
            "progress": f"{100 * job.progress:.0f}%",
            "message": job.message,
            "error": job.error,
            "created": job.created_at,
        }
        for job in services.jobs.history(limit=limit)
    ]
    columns = ["id", "kind", "status", "progress", "message", "error", "created"]
    return pd.DataFrame(rows, columns=columns)


def job_detail(services: Services, job_id: float | None) -> tuple[str, str]:
    """Progress bar and the last log lines of one job."""
    if not job_id:
        return "", ""
    try:
        info = services.jobs.status(int(job_id))
        lines = services.jobs.logs(int(job_id))
    except ValueError as error:
        return ui.notice_html("error", str(error)), ""
    bar = ui.progress_html(info.progress, f"job {info.id} {info.status}: {info.message}")
    if info.error:
        bar += ui.notice_html("error", info.error)
    return bar, "\n".join(lines[-LOG_LINES_SHOWN:])


def job_skipped_table(services: Services, job_id: float | None) -> pd.DataFrame:
    """The selected benchmark job's skipped tasks and why (filled when the job finishes)."""
    rows: list[dict[str, str]] = []
    if job_id:
        try:
            rows = job_skipped(services, int(job_id))
        except ValueError:
            rows = []
    return pd.DataFrame(rows, columns=list(SKIPPED_COLUMNS))


def estimate_view(
    services: Services,
    is_admin: bool,
    suite: str,
    models: list[str] | None,
    tasks: list[str] | None,
    families: list[str] | None,
) -> tuple[pd.DataFrame, str]:
    """The estimate table (task, model, items, cached, est. seconds, then the total) and a
    note (the total, skipped tasks, where real data is read from), or an error note."""
    empty = pd.DataFrame()
    if not is_admin:
        return empty, ui.notice_html("error", NOT_ADMIN)
    try:
        estimate = bench_estimate(
            services, str(suite or ""), list(models or []), list(tasks or []), list(families or [])
        )
    except (ValueError, KeyError) as error:
        return empty, ui.notice_html("error", error.args[0] if error.args else str(error))
    skipped = f" {len(estimate.skipped)} task(s) will be skipped." if estimate.skipped else ""
    note = (
        f"About {estimate.total_seconds:.0f} s of embedding for what the cache lacks "
        f"(nothing was run).{skipped} {shared_data_line(services)}"
    )
    return pd.DataFrame(estimate.rows()), ui.notice_html("info", note)


def cancel_job(services: Services, is_admin: bool, job_id: float | None) -> str:
    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    if not job_id:
        return ui.notice_html("error", "Pick a job id to cancel.")
    try:
        cancelled = services.jobs.cancel(int(job_id))
    except ValueError as error:
        return ui.notice_html("error", str(error))
    if cancelled:
        return ui.notice_html("info", f"Asked job {int(job_id)} to stop.")
    return ui.notice_html("warning", f"Job {int(job_id)} has already finished.")


def create_study(
    services: Services,
    is_admin: bool,
    run_id: Any,
    models: list[str] | None,
    name: str,
    n_items: float,
    raters_per_item: float,
    reveal: bool,
    seed: float,
    public_title: str = "",
    open_enrolment: bool = False,
    gold_percent: float = 0.0,
) -> str:
    """Create a blinded study from a stored benchmark run's outputs. `name` is internal (admin
    pages only); raters see `public_title`. `gold_percent` of the items are quality-control
    items (one side the oracle's top-3), indistinguishable to raters."""
    from medheb_app.study.items import create_study as create
    from medheb_app.ui.explorer_tab import load_summary

    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    if run_id in (None, ""):
        return ui.notice_html("error", "Pick a finished benchmark run.")
    try:
        summary = load_summary(services, int(run_id))
        created = create(
            services.store,
            name or "",
            list(models or []),
            summary.out_dir,
            n_items=int(n_items),
            raters_per_item=int(raters_per_item),
            reveal_after_vote=bool(reveal),
            seed=int(seed),
            describe=describe_for_run(services.settings, summary.suite),
            public_title=public_title or "",
            open_enrolment=bool(open_enrolment),
            gold_share=float(gold_percent or 0) / 100.0,
        )
    except (ValueError, KeyError, FileNotFoundError) as error:
        return ui.notice_html("error", str(error))
    withheld = (
        f" {len(created.withheld)} queries could not be shown and were withheld."
        if created.withheld
        else ""
    )
    return ui.notice_html(
        "info",
        f"Created study {created.id} ({created.n_items} items).{withheld} Issue invitations "
        "under Invitations; raters sign in on the /rate page.",
    )


def study_picker(services: Services) -> list[tuple[str, int]]:
    """Every study by internal name and public title (admin only)."""
    from medheb_app.study import list_studies

    return [
        (f"Study {s['id']}: {s['name']} · raters see {s.get('public_title') or '-'!r}", s["id"])
        for s in list_studies(services.store)
    ]


def issue_invitations(
    services: Services, is_admin: bool, study_id: Any, n: float, label: str
) -> str:
    """New invitations, each shown ONCE as a link and a short code (stored hashed)."""
    import html

    from medheb_app.study import StudyError, create_invitations

    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    if study_id in (None, ""):
        return ui.notice_html("error", "Pick a study.")
    try:
        made = create_invitations(services.store, int(study_id), int(n or 1), label or "")
    except StudyError as error:
        return ui.notice_html("error", str(error))
    rows = "".join(
        f"<tr><td>{i.id}</td><td><code>{html.escape(i.link)}</code></td>"
        f"<td><code>{html.escape(i.code)}</code></td><td>{html.escape(i.label)}</td></tr>"
        for i in made
    )
    return ui.notice_html(
        "warning",
        "Copy these now: they are shown only once (the server keeps only their hashes). "
        "Prefix each link with this server's address.",
    ) + (
        '<table id="admin-invitations"><tr><th>id</th><th>link</th><th>code</th>'
        f"<th>label</th></tr>{rows}</table>"
    )


def invitation_table(services: Services, is_admin: bool, study_id: Any) -> pd.DataFrame | None:
    from medheb_app.study import list_invitations

    if not is_admin or study_id in (None, ""):
        return None
    rows = [
        {
            "id": i.id,
            "label": i.label,
            "used": i.used,
            "rater": i.display_name,
            "revoked": i.revoked,
            "created": i.created_at,
        }
        for i in list_invitations(services.store, int(study_id))
    ]
    return pd.DataFrame(rows, columns=["id", "label", "used", "rater", "revoked", "created"])


def revoke(services: Services, is_admin: bool, invitation_id: Any) -> str:
    from medheb_app.study import StudyError, revoke_invitation

    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    if not invitation_id:
        return ui.notice_html("error", "Type the id of the invitation to revoke.")
    try:
        info = revoke_invitation(services.store, int(invitation_id))
    except StudyError as error:
        return ui.notice_html("error", str(error))
    return ui.notice_html("info", f"Invitation {info.id} revoked; its rater can no longer vote.")


def medheb_task_names() -> list[str]:
    """The medheb-lite suite's task names (registered builders only: nothing is built)."""
    from medheb_app.tasks.medheb import get_suite

    return get_suite("medheb-lite").names()


def admin_choices(services: Services):
    """Fresh picker contents after sign-in: models (the shipped ones chosen), suites, runs."""
    from medheb_app.demo import default_demo_models
    from medheb_app.search import build_default_model
    from medheb_app.services import BENCH_SUITES
    from medheb_app.ui.explorer_tab import run_choices

    models = [str(entry["spec"]) for entry in services.list_models()]
    shipped = [m for m in default_demo_models(services.settings) if m in models]
    runs = run_choices(services)
    return (
        gr.update(choices=models, value=shipped),
        gr.update(choices=list(BENCH_SUITES), value=BENCH_SUITES[0]),
        gr.update(choices=models, value=build_default_model(services.settings)),
        gr.update(choices=runs, value=runs[0][1] if runs else None),
    )


# ---------------------------------------------------------------- layout


def build_admin_tab(services: Services, auth: Authenticator) -> dict[str, Any]:
    """Sign-in link, then (for a signed-in admin) job launchers, job monitor, study creation."""
    login_note = gr.HTML(SIGNED_OUT_NOTE, elem_id="admin-login-note")
    if auth.admin_users:  # on a Space with OAuth: Hugging Face sign-in for ADMIN_USERS
        gr.LoginButton(value="Sign in with Hugging Face (admins listed in ADMIN_USERS)")
    timer = gr.Timer(2.0, active=False)
    with gr.Column(visible=False, elem_id="admin-panel") as panel:
        job_note = gr.HTML(elem_id="admin-job-note")
        with gr.Tab("Benchmark run"):
            shared_note = gr.Markdown("", elem_id="admin-shared-data")  # filled for admins only
            suite = gr.Dropdown(label="Suite", choices=[], elem_id="admin-suite")
            bench_models = gr.Dropdown(
                label="Models (random and oracle are the floor and ceiling marks)",
                choices=[],
                multiselect=True,
                elem_id="admin-bench-models",
            )
            with gr.Row():
                bench_tasks = gr.Dropdown(
                    label="Tasks (MedHEB; empty = all)",
                    choices=medheb_task_names(),
                    multiselect=True,
                )
                bench_families = gr.Dropdown(
                    label="Families (MedHEB; empty = all)", choices=list(FAMILIES), multiselect=True
                )
            with gr.Row():
                estimate = gr.Button("Estimate from the embedding cache", size="sm")
                bench_start = gr.Button("Start benchmark run", elem_id="admin-start-bench")
            estimate_table = gr.Dataframe(
                label="Estimate: items each model embeds, how many the embedding cache holds",
                interactive=False,
                elem_id="admin-estimate",
            )
            estimate_note = gr.HTML(elem_id="admin-estimate-note")
        with gr.Tab("Training"):
            recipe = gr.Dropdown(label="Recipe", choices=list(TRAIN_RECIPES), value="report")
            tag = gr.Textbox(
                label="Checkpoint tag (becomes dual-lite@TAG, or medemb-lite@TAG for medemb)"
            )
            epochs = gr.Number(label="Epochs", value=5, precision=0, minimum=1)
            n_train = gr.Number(
                label="Phantom studies (report recipe)", value=2000, precision=0, minimum=4
            )
            train_start = gr.Button("Start training")
        with gr.Tab("Index build"):
            index_name = gr.Textbox(
                label="Index name", value="demo-cxr", elem_id="admin-index-name"
            )
            index_model = gr.Dropdown(label="Model", choices=[])
            corpus = gr.Dropdown(
                label="Source (phantom[:N], nih:PATH, mimic:PATH, chexpert:PATH, dicom:PATH, "
                "folder:PATH, medmnist:FILE, manifest:FILE)",
                choices=list(INDEX_CORPORA),
                value="phantom",
                allow_custom_value=True,
            )
            index_start = gr.Button("Start index build", elem_id="admin-start-index")
        with gr.Tab("Create study"):
            run = gr.Dropdown(label="Benchmark run", choices=[])
            study_models = gr.Dropdown(label="Models to compare", choices=[], multiselect=True)
            study_name = gr.Textbox(label="Internal study name (admins only)")
            public_title = gr.Textbox(
                label="Public title (what raters see: do not name the models)",
                elem_id="admin-public-title",
            )
            open_enrolment = gr.Checkbox(
                label="Open enrolment (anyone with the /rate address can join as a new rater)",
                value=False,
            )
            gold = gr.Number(
                label="Gold (quality-control) items, % of items", value=0, minimum=0, maximum=50
            )
            n_items = gr.Number(label="Queries", value=30, precision=0, minimum=1)
            raters = gr.Number(label="Raters per item", value=1, precision=0, minimum=1)
            reveal = gr.Checkbox(label="Reveal model names after each vote", value=True)
            seed = gr.Number(label="Seed", value=0, precision=0)
            create = gr.Button("Create study")
            study_note = gr.HTML()
        with gr.Tab("Invitations"):
            with gr.Row():
                invite_study = gr.Dropdown(label="Study", choices=[], elem_id="admin-invite-study")
                refresh_studies = gr.Button("Refresh", size="sm")
            with gr.Row():
                n_invites = gr.Number(label="How many", value=1, precision=0, minimum=1)
                invite_label = gr.Textbox(label="Label (e.g. the rater's initials)")
                invite = gr.Button("Issue invitations", elem_id="admin-invite")
            invite_note = gr.HTML(elem_id="admin-invite-note")
            invitations = gr.Dataframe(label="Invitations", interactive=False)
            with gr.Row():
                revoke_id = gr.Number(label="Invitation id", precision=0)
                revoke_button = gr.Button("Revoke", variant="stop")
        gr.Markdown("### Jobs")
        jobs = gr.Dataframe(label="History", interactive=False, elem_id="admin-jobs")
        with gr.Row():
            job_id = gr.Number(label="Job id", precision=0)
            cancel = gr.Button("Cancel job", variant="stop")
        job_progress = gr.HTML()
        job_skips = gr.Dataframe(
            label="Skipped tasks of the selected benchmark job, and why",
            interactive=False,
            elem_id="admin-job-skipped",
        )
        job_log = gr.Textbox(
            label="Log", lines=10, max_lines=20, autoscroll=True, elem_id="admin-log"
        )

    def on_load(admin: bool) -> tuple:
        """What the panel shows when the page opens: everything for an admin, else a link."""
        if not admin:
            nothing = gr.update()
            return SIGNED_OUT_NOTE, gr.Column(visible=False), gr.Timer(active=False), *[nothing] * 7
        return (
            SIGNED_IN_NOTE,
            gr.Column(visible=True),
            gr.Timer(active=True),
            *admin_choices(services),
            job_table(services),
            gr.update(choices=study_picker(services)),
            shared_data_line(services),
        )

    def _start(kind, make_params):
        def handler(request: gr.Request, *values):
            admin = auth.is_admin(request)
            new_id, note = start_job(services, admin, kind, make_params(*values))
            return note, (new_id if new_id is not None else gr.update())

        return handler

    def _poll(selected, request: gr.Request):
        if not auth.is_admin(request):
            return gr.update(), "", "", gr.update(), gr.Timer(active=False)
        detail = job_detail(services, selected)
        return job_table(services), *detail, job_skipped_table(services, selected), gr.Timer()

    def _run_models(run_id, request: gr.Request):
        from medheb_app.ui.explorer_tab import load_summary

        if run_id in (None, "") or not auth.is_admin(request):
            return gr.update(choices=[], value=[])
        try:
            names = list(load_summary(services, int(run_id)).models)
        except Exception:
            return gr.update(choices=[], value=[])
        return gr.update(choices=names, value=names[:2])

    job_outputs = [job_note, job_id]
    bench_start.click(
        _start(
            "bench-run",
            lambda s, m, t, f: {
                "suite": s,
                "models": list(m or []),
                "tasks": list(t or []),
                "families": list(f or []),
            },
        ),
        [suite, bench_models, bench_tasks, bench_families],
        job_outputs,
        api_name=False,
    )

    def _estimate(chosen_suite, chosen_models, chosen_tasks, chosen_families, request: gr.Request):
        admin = auth.is_admin(request)
        return estimate_view(
            services, admin, chosen_suite, chosen_models, chosen_tasks, chosen_families
        )

    estimate.click(
        _estimate,
        [suite, bench_models, bench_tasks, bench_families],
        [estimate_table, estimate_note],
        api_name=False,
    )
    train_start.click(
        _start("train", lambda r, t, e, n: {"recipe": r, "tag": t, "epochs": e, "n": n}),
        [recipe, tag, epochs, n_train],
        job_outputs,
        api_name=False,
    )
    index_start.click(
        _start("index-build", lambda n, m, c: {"name": n, "model": m, "source": c}),
        [index_name, index_model, corpus],
        job_outputs,
        api_name=False,
    )

    def _cancel(selected, request: gr.Request):
        return cancel_job(services, auth.is_admin(request), selected)

    def _create(request: gr.Request, *values):
        return create_study(services, auth.is_admin(request), *values)

    cancel.click(_cancel, [job_id], [job_note], api_name=False)

    def _studies(request: gr.Request):
        if not auth.is_admin(request):
            return gr.update(choices=[], value=None)
        choices = study_picker(services)
        return gr.update(choices=choices, value=choices[-1][1] if choices else None)

    def _invite(study_id, n, label, request: gr.Request):
        admin = auth.is_admin(request)
        note = issue_invitations(services, admin, study_id, n, label)
        return note, invitation_table(services, admin, study_id)

    def _invitations(study_id, request: gr.Request):
        return invitation_table(services, auth.is_admin(request), study_id)

    def _revoke(study_id, invitation_id, request: gr.Request):
        admin = auth.is_admin(request)
        return revoke(services, admin, invitation_id), invitation_table(services, admin, study_id)

    refresh_studies.click(_studies, None, [invite_study], api_name=False)
    invite.click(
        _invite, [invite_study, n_invites, invite_label], [invite_note, invitations], api_name=False
    )
    invite_study.change(_invitations, [invite_study], [invitations], api_name=False)
    revoke_button.click(
        _revoke, [invite_study, revoke_id], [invite_note, invitations], api_name=False
    )
    run.change(_run_models, [run], [study_models], api_name=False)
    create.click(
        _create,
        [
            run,
            study_models,
            study_name,
            n_items,
            raters,
            reveal,
            seed,
            public_title,
            open_enrolment,
            gold,
        ],
        [study_note],
        api_name=False,
    )
    timer.tick(_poll, [job_id], [jobs, job_progress, job_log, job_skips, timer], api_name=False)
    return {
        "panel": panel,
        "on_load": on_load,
        "load_outputs": [
            login_note,
            panel,
            timer,
            bench_models,
            suite,
            index_model,
            run,
            jobs,
            invite_study,
            shared_note,
        ],
    }
