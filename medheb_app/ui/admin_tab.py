"""Admin panel: background jobs (benchmark runs, training, index builds); the study tabs are
built by medheb_app.ui.admin_study.

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
from medheb_app.services import Services
from medheb_app.services.admin_jobs import AdminJobs
from medheb_app.services.runs import SKIPPED_COLUMNS
from medheb_app.ui import components as ui
from medheb_app.ui.admin_study import NOT_ADMIN, build_study_admin, study_picker
from medheb_app.ui.admin_tokens import build_token_admin

log = logging.getLogger(__name__)
LOG_LINES_SHOWN = 200
TRAIN_RECIPES = AdminJobs.recipes  # the one recipe registry (medheb_app.train.recipes)
OPTIONAL_PARAMS = ("tasks", "families")  # empty: the whole suite


SIGNED_OUT_NOTE = (
    '<div class="medheb-notice medheb-info" role="status"><a href="/auth/admin" '
    'id="admin-sign-in-link">Sign in as admin</a> to run jobs and create studies.</div>'
)
SIGNED_IN_NOTE = (
    '<div class="medheb-notice medheb-info" role="status">Signed in as admin · '
    '<a href="/auth/signout" id="admin-sign-out">Sign out</a></div>'
)


def start_job(
    services: Services, is_admin: bool, kind: str, params: dict[str, Any], who: str = "admin"
):
    """Submit a job of `kind`; returns (job id or None, message). Refused unless admin."""
    if not is_admin:
        return None, ui.notice_html("error", NOT_ADMIN)
    if kind not in AdminJobs.kinds:
        return None, ui.notice_html("error", f"Unknown job kind {kind!r}.")
    missing = [
        key
        for key, value in params.items()
        if value in (None, "", []) and key not in OPTIONAL_PARAMS
    ]
    if missing:
        return None, ui.notice_html("error", f"Fill in: {', '.join(missing)}.")
    try:
        job_id = services.admin_jobs.start(kind, params)
    except ValueError as error:  # a sentence: a source outside the server's roots
        return None, ui.notice_html("error", str(error))
    services.audit.admin("job-start", f"job {job_id} {kind}", who=who)
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
            rows = services.runs.job_skipped(int(job_id))
        except ValueError:
            rows = []
    return pd.DataFrame(rows, columns=list(SKIPPED_COLUMNS))


def training_estimate_view(
    services: Services, is_admin: bool, recipe: str, epochs: float | None, n: float | None
) -> str:
    """How long a training job with these settings will take, before it starts: from the
    newest earlier job of the recipe, else timed on short calibration runs (which load the
    recipe's models: admins only, and only on this button)."""
    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    try:
        estimate = services.admin_jobs.training_estimate(
            str(recipe or ""), int(epochs or 5), int(n) if n else None
        )
    except (ValueError, KeyError) as error:
        return ui.notice_html("error", error.args[0] if error.args else str(error))
    except Exception:
        log.exception("training estimate failed")
        return ui.notice_html("error", "The training estimate could not be computed.")
    if estimate is None:
        return ui.notice_html("warning", "No earlier job of this recipe to estimate from.")
    return ui.notice_html("info", f"Training: {estimate.summary_line()}.")


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
        estimate = services.runs.estimate(
            str(suite or ""), list(models or []), list(tasks or []), list(families or [])
        )
    except (ValueError, KeyError) as error:
        return empty, ui.notice_html("error", error.args[0] if error.args else str(error))
    skipped = f" {len(estimate.skipped)} task(s) will be skipped." if estimate.skipped else ""
    note = (
        f"Embedding what the cache lacks: {estimate.summary_line()}; the range is wide "
        f"where a model was never measured (nothing was run).{skipped} "
        f"{services.runs.shared_data_line()}"
    )
    return pd.DataFrame(estimate.rows()), ui.notice_html("info", note)


def cancel_job(services: Services, is_admin: bool, job_id: float | None, who: str = "admin") -> str:
    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    if not job_id:
        return ui.notice_html("error", "Pick a job id to cancel.")
    try:
        cancelled = services.jobs.cancel(int(job_id))
    except ValueError as error:
        return ui.notice_html("error", str(error))
    if cancelled:
        services.audit.admin("job-cancel", f"job {int(job_id)}", who=who)
        return ui.notice_html("info", f"Asked job {int(job_id)} to stop.")
    return ui.notice_html("warning", f"Job {int(job_id)} has already finished.")


def admin_choices(services: Services):
    """Fresh picker contents after sign-in: models (the shipped ones chosen), suites, runs."""
    models = [str(entry["spec"]) for entry in services.list_models()]
    shipped = [m for m in services.admin_jobs.default_models() if m in models]
    runs = services.runs.choices()
    return (
        gr.update(choices=models, value=shipped),
        gr.update(choices=list(AdminJobs.suites), value=AdminJobs.suites[0]),
        gr.update(choices=models, value=services.admin_jobs.build_default_model()),
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
                    choices=services.admin_jobs.medheb_task_names(),
                    multiselect=True,
                )
                bench_families = gr.Dropdown(
                    label="Families (MedHEB; empty = all)",
                    choices=list(AdminJobs.families),
                    multiselect=True,
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
            with gr.Row():
                train_estimate = gr.Button("Estimate training time", size="sm")
                train_start = gr.Button("Start training")
            train_estimate_note = gr.HTML(elem_id="admin-train-estimate")
        with gr.Tab("Index build"):
            index_name = gr.Textbox(
                label="Index name", value="demo-cxr", elem_id="admin-index-name"
            )
            index_model = gr.Dropdown(label="Model", choices=[])
            corpus = gr.Dropdown(
                label="Source (phantom[:N], nih:PATH, mimic:PATH, chexpert:PATH, dicom:PATH, "
                "folder:PATH, medmnist:FILE, manifest:FILE)",
                choices=list(AdminJobs.corpora),
                value="phantom",
                allow_custom_value=True,
            )
            index_replace = gr.Checkbox(
                label="Replace the index if it already exists for this model",
                value=False,
                elem_id="admin-index-replace",
            )
            index_start = gr.Button("Start index build", elem_id="admin-start-index")
        study = build_study_admin(services, auth)
        build_token_admin(services, auth)  # API tokens (ui/admin_tokens.py)
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
            services.runs.shared_data_line(),
        )

    def _start(kind, make_params):
        def handler(request: gr.Request, *values):
            admin, who = auth.is_admin(request), auth.admin_identity(request)
            new_id, note = start_job(services, admin, kind, make_params(*values), who)
            return note, (new_id if new_id is not None else gr.update())

        return handler

    def _poll(selected, request: gr.Request):
        if not auth.is_admin(request):
            return gr.update(), "", "", gr.update(), gr.Timer(active=False)
        detail = job_detail(services, selected)
        return job_table(services), *detail, job_skipped_table(services, selected), gr.Timer()

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
        api_visibility="private",
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
        api_visibility="private",
    )

    def _train_estimate(chosen_recipe, chosen_epochs, chosen_n, request: gr.Request):
        admin = auth.is_admin(request)
        return training_estimate_view(services, admin, chosen_recipe, chosen_epochs, chosen_n)

    train_estimate.click(
        _train_estimate,
        [recipe, epochs, n_train],
        [train_estimate_note],
        api_visibility="private",
        concurrency_limit=1,
    )
    train_start.click(
        _start("train", lambda r, t, e, n: {"recipe": r, "tag": t, "epochs": e, "n": n}),
        [recipe, tag, epochs, n_train],
        job_outputs,
        api_visibility="private",
    )
    index_start.click(
        _start(
            "index-build",
            lambda n, m, c, r: {"name": n, "model": m, "source": c, "replace": bool(r)},
        ),
        [index_name, index_model, corpus, index_replace],
        job_outputs,
        api_visibility="private",
    )

    def _cancel(selected, request: gr.Request):
        return cancel_job(services, auth.is_admin(request), selected, auth.admin_identity(request))

    cancel.click(_cancel, [job_id], [job_note], api_visibility="private")

    timer.tick(
        _poll, [job_id], [jobs, job_progress, job_log, job_skips, timer], api_visibility="private"
    )
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
            study["run"],
            jobs,
            study["invite_study"],
            shared_note,
        ],
    }
