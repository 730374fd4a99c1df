"""Admin panel: background jobs (benchmark runs, training, index builds) and study creation.

Built only when ADMIN_PASSWORD is set. Signing in sets a flag in gr.State, which lives on
the server, so a browser cannot forge it; every callback checks it again before acting.
Job progress and logs are polled with a gr.Timer while the panel is open.
"""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr
import pandas as pd

from medheb_app.services import INDEX_CORPORA, JOB_FACTORIES, Services, describe_for_run
from medheb_app.ui import components as ui

log = logging.getLogger(__name__)
NOT_ADMIN = "Sign in as admin first."
LOG_LINES_SHOWN = 200
TRAIN_RECIPES = ("report", "label-aware", "medemb")


def sign_in(services: Services, password: str | None) -> tuple[bool, str]:
    if services.check_admin(password):
        return True, ui.notice_html("info", "Signed in as admin.")
    return False, ui.notice_html("error", "Wrong admin password.")


def start_job(services: Services, is_admin: bool, kind: str, params: dict[str, Any]):
    """Submit a job of `kind`; returns (job id or None, message). Refused unless admin."""
    if not is_admin:
        return None, ui.notice_html("error", NOT_ADMIN)
    if kind not in JOB_FACTORIES:
        return None, ui.notice_html("error", f"Unknown job kind {kind!r}.")
    missing = [key for key, value in params.items() if value in (None, "", [])]
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
) -> str:
    """Create a blinded study from a stored benchmark run's outputs."""
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
        "with `study invite` for raters to sign in on the /rate page.",
    )


def admin_choices(services: Services):
    """Fresh picker contents after sign-in: models, suites, runs."""
    from medheb_app.tasks.medheb import SUITES
    from medheb_app.ui.explorer_tab import run_choices

    models = [str(entry["spec"]) for entry in services.list_models()]
    runs = run_choices(services)
    return (
        gr.update(choices=models, value=[m for m in ("random", "oracle") if m in models]),
        gr.update(choices=list(SUITES), value=next(iter(SUITES), None)),
        gr.update(choices=models, value=services.settings.default_model),
        gr.update(choices=runs, value=runs[0][1] if runs else None),
    )


# ---------------------------------------------------------------- layout


def build_admin_tab(services: Services) -> dict[str, Any]:
    """Password gate, then job launchers, job monitor and study creation."""
    with gr.Row():
        password = gr.Textbox(label="Admin password", type="password", elem_id="admin-password")
        login = gr.Button("Sign in", elem_id="admin-sign-in")
    login_note = gr.HTML(elem_id="admin-login-note")
    is_admin = gr.State(False)
    timer = gr.Timer(2.0, active=False)
    with gr.Column(visible=False, elem_id="admin-panel") as panel:
        job_note = gr.HTML(elem_id="admin-job-note")
        with gr.Tab("Benchmark run"):
            suite = gr.Dropdown(label="Suite", choices=[])
            bench_models = gr.Dropdown(label="Models", choices=[], multiselect=True)
            bench_start = gr.Button("Start benchmark run", elem_id="admin-start-bench")
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
            study_name = gr.Textbox(label="Study name (shown to raters: do not name the models)")
            n_items = gr.Number(label="Queries", value=30, precision=0, minimum=1)
            raters = gr.Number(label="Raters per item", value=1, precision=0, minimum=1)
            reveal = gr.Checkbox(label="Reveal model names after each vote", value=True)
            seed = gr.Number(label="Seed", value=0, precision=0)
            create = gr.Button("Create study")
            study_note = gr.HTML()
        gr.Markdown("### Jobs")
        jobs = gr.Dataframe(label="History", interactive=False, elem_id="admin-jobs")
        with gr.Row():
            job_id = gr.Number(label="Job id", precision=0)
            cancel = gr.Button("Cancel job", variant="stop")
        job_progress = gr.HTML()
        job_log = gr.Textbox(
            label="Log", lines=10, max_lines=20, autoscroll=True, elem_id="admin-log"
        )

    def _login(pw):
        ok, note = sign_in(services, pw)
        if not ok:
            nothing = gr.update()
            return False, note, gr.Column(visible=False), gr.Timer(active=False), *[nothing] * 5
        return (
            True,
            note,
            gr.Column(visible=True),
            gr.Timer(active=True),
            *admin_choices(services),
            job_table(services),
        )

    def _start(kind, make_params):
        def handler(admin, *values):
            new_id, note = start_job(services, admin, kind, make_params(*values))
            return note, (new_id if new_id is not None else gr.update())

        return handler

    def _poll(admin, selected):
        if not admin:
            return gr.update(), "", "", gr.Timer(active=False)
        return job_table(services), *job_detail(services, selected), gr.Timer()

    def _run_models(run_id):
        from medheb_app.ui.explorer_tab import load_summary

        if run_id in (None, ""):
            return gr.update(choices=[], value=[])
        try:
            names = list(load_summary(services, int(run_id)).models)
        except Exception:
            return gr.update(choices=[], value=[])
        return gr.update(choices=names, value=names[:2])

    login.click(
        _login,
        [password],
        [is_admin, login_note, panel, timer, bench_models, suite, index_model, run, jobs],
        api_name=False,
    )
    job_outputs = [job_note, job_id]
    bench_start.click(
        _start("bench-run", lambda s, m: {"suite": s, "models": list(m or [])}),
        [is_admin, suite, bench_models],
        job_outputs,
        api_name=False,
    )
    train_start.click(
        _start("train", lambda r, t, e, n: {"recipe": r, "tag": t, "epochs": e, "n": n}),
        [is_admin, recipe, tag, epochs, n_train],
        job_outputs,
        api_name=False,
    )
    index_start.click(
        _start("index-build", lambda n, m, c: {"name": n, "model": m, "source": c}),
        [is_admin, index_name, index_model, corpus],
        job_outputs,
        api_name=False,
    )
    cancel.click(
        lambda a, j: cancel_job(services, a, j), [is_admin, job_id], [job_note], api_name=False
    )
    run.change(_run_models, [run], [study_models], api_name=False)
    create.click(
        lambda a, *v: create_study(services, a, *v),
        [is_admin, run, study_models, study_name, n_items, raters, reveal, seed],
        [study_note],
        api_name=False,
    )
    timer.tick(_poll, [is_admin, job_id], [jobs, job_progress, job_log, timer], api_name=False)
    return {"password": password, "login": login, "panel": panel, "is_admin": is_admin}
