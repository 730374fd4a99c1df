"""Study analysis: preference rates with intervals by top-1 stratum, Bradley-Terry, agreement,
position bias and a CSV of the votes (MedHEB section 5.6, Figure 7).

Every number comes from services.studies (medheb_app.study.analysis over the study's votes);
this module only lays them out. Analysis and export name the models, so both are admin-only,
checked inside each handler from the request's cookie (a call by `fn_index` from any session
gets nothing without it).
"""

from __future__ import annotations

import html
import re
from typing import Any

import gradio as gr
import pandas as pd
from fastapi import Request, Response

from medheb_app.services import Services
from medheb_app.services.studies import (
    GOLD_ACCURACY_HELP,
    StudyError,
    fraction,
    item_counts,
    sensitivity_gaps,
    sensitivity_results,
)
from medheb_app.ui import components as ui

OUTCOME_LABELS = {"a": "A preferred", "b": "B preferred", "tie": "Tie", "both_poor": "Both poor"}


def study_options(services: Services) -> list[tuple[str, int]]:
    return [
        (
            f"Study {s['id']}: {s['name']} ({item_counts(s['n_items'], s['n_gold'])}, "
            f"{s['votes']} votes)",
            int(s["id"]),
        )
        for s in services.studies.list()
    ]


def _percent(rate: float | None, lo: float | None, hi: float | None) -> str:
    if rate is None or pd.isna(rate):
        return "–"
    return f"{100 * rate:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}]"


def rates_table(rates: pd.DataFrame) -> pd.DataFrame:
    """One row per (pair, stratum): n and each outcome's rate with its 95% Wilson interval."""
    rows = []
    for record in rates.to_dict(orient="records"):
        row = {
            "model A": record["model_a"],
            "model B": record["model_b"],
            "stratum": record["stratum"],
            "n": record["n"],
        }
        for key, label in OUTCOME_LABELS.items():
            row[label] = _percent(record[f"{key}_rate"], record[f"{key}_lo"], record[f"{key}_hi"])
        rows.append(row)
    return pd.DataFrame(rows)


def overview_html(summary: dict[str, Any]) -> str:
    agreement, bias = summary["agreement"], summary["position_bias"]
    kappa = agreement.get("kappa")
    agree = (
        f"{agreement['method']} kappa {kappa:.2f} on {agreement['n_items']} items"
        if agreement.get("method") and kappa is not None
        else "no item has two raters yet"
    )
    left = bias.get("left_rate")
    position = (
        f"left list chosen in {100 * left:.0f}% of {bias['n']} A/B votes "
        f"(95% CI {100 * bias['lo']:.0f}-{100 * bias['hi']:.0f}%, binomial p = "
        f"{bias['p_value']:.3f})"
        if left is not None
        else "no A/B votes yet"
    )
    kept = summary.get("agreement_kept") or {}
    excluded = summary.get("excluded_raters") or []
    qc = ""
    if summary.get("min_gold_accuracy") is not None:
        kept_kappa = kept.get("kappa")
        qc = (
            f"<div>Quality control: {len(excluded)} rater(s) below "
            f"{100 * summary['min_gold_accuracy']:.0f}% gold accuracy excluded"
            f"{' (' + html.escape(', '.join(map(str, excluded))) + ')' if excluded else ''}; "
            "agreement without them: "
            + (
                f"{html.escape(str(kept.get('method')))} kappa {kept_kappa:.2f}"
                if kept_kappa is not None
                else "not computable"
            )
            + ".</div>"
        )
    return (
        f"<div><b>{summary['n_votes']}</b> votes on <b>{summary['n_items']}</b> items by "
        f"<b>{summary['n_raters']}</b> raters"
        f" (+{summary.get('n_gold_votes', 0)} gold votes, left out of the comparison)."
        f"{_cannot_judge_text(summary.get('cannot_judge'))}</div>"
        f"<div>Rater agreement (all raters): {html.escape(agree)}.</div>{qc}"
        f"<div>Position bias: {html.escape(position)}.</div>"
        f"<div><i>{html.escape(summary['ties'])}.</i></div>"
    )


def _cannot_judge_text(counts: dict[str, Any] | None) -> str:
    """' N more could not be judged (reasons)', or nothing."""
    if not counts or not counts.get("n"):
        return ""
    reasons = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts["reasons"].items())
    return f" {counts['n']} more could not be judged ({html.escape(reasons)}), also left out."


QUALITY_LABELS = {
    "rater": "rater",
    "n_votes": "votes",
    "n_gold": "gold votes",
    "gold_accuracy": "gold accuracy",
    "median_seconds": "median s / item",
    "side_a_share": "share of A among A/B",
}


def quality_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Per rater: gold accuracy, median seconds per item, side bias (share of A)."""
    frame = pd.DataFrame(records, columns=list(QUALITY_LABELS))
    for column in ("gold_accuracy", "side_a_share"):
        frame[column] = [
            "–" if v is None or pd.isna(v) else f"{100 * float(v):.0f}%" for v in frame[column]
        ]
    frame["median_seconds"] = [
        "–" if v is None or pd.isna(v) else f"{float(v):.1f}" for v in frame["median_seconds"]
    ]
    return frame.rename(columns=QUALITY_LABELS)


MRMC_LABELS = {
    "RRRC": "ORH: random raters, random queries",
    "FRRC": "ORH: fixed raters, random queries",
    "RRFC": "ORH: random raters, fixed queries",
    "bootstrap": "Cluster bootstrap (raters x queries)",
}


def _sig(value: float | None, digits: int = 3) -> str:
    """A number at `digits` significant digits ('–' for none)."""
    if value is None or pd.isna(value):
        return "–"
    return f"{float(value):.{digits}g}"


def _p_text(value: float | None) -> str:
    if value is None or pd.isna(value):
        return "–"
    return "< 0.001" if value < 0.001 else _sig(value)


def mrmc_html(pairs: list[dict[str, Any]]) -> str:
    """Per model pair: the preference rate for A with each MRMC interval and Wilson's, the
    difference, df and p-values, and one sentence each on what the interval generalises to."""
    if not pairs:
        return ""
    blocks = []
    for pair in pairs:
        a, b = html.escape(str(pair["model_a"])), html.escape(str(pair["model_b"]))
        head = (
            f"<h4>Preference for {a} over {b}: {pair['n_readers']} raters x "
            f"{pair['n_cases']} queries (ties {html.escape(pair['ties'])})</h4>"
        )
        if pair.get("error"):
            blocks.append(head + ui.notice_html("info", pair["error"]))
            continue
        rows = []
        for name, label in MRMC_LABELS.items():
            res = pair["results"].get(name)
            if res is None:
                continue
            ni = (
                f"{_p_text(res['ni_p_value'])} (margin {_sig(res['margin'])})"
                if res.get("margin") is not None
                else "–"
            )
            rate = _percent(res["preference"], res["preference_lo"], res["preference_hi"])
            if res.get("preference_clipped"):
                rate += " (cut at 0-100%: too few raters for this interval)"
            rows.append(
                f"<tr><td>{label}</td><td>{rate}</td>"
                f"<td>{_sig(res['difference'])} [{_sig(res['lo'])}, {_sig(res['hi'])}]</td>"
                f"<td>{'∞' if res['df'] is None else _sig(res['df'])}</td>"
                f"<td>{_p_text(res['p_value'])}</td><td>{ni}</td>"
                f"<td>{html.escape(res['generalises_to'])}</td></tr>"
            )
        wilson = pair.get("wilson") or {}
        if wilson.get("n"):
            rows.append(
                f"<tr><td>Wilson (n = {wilson['n']} votes)</td>"
                f"<td>{_percent(wilson['preference'], wilson['lo'], wilson['hi'])}</td>"
                f"<td>–</td><td>–</td><td>–</td><td>–</td>"
                f"<td>{html.escape(wilson['generalises_to'])}</td></tr>"
            )
        dropped = pair.get("dropped_raters") or []
        note = (
            f"<div>Left out (fewer than two rated queries): {len(dropped)} rater(s).</div>"
            if dropped
            else ""
        )
        blocks.append(
            head + '<table class="medheb-mrmc"><thead><tr><th>analysis</th>'
            f"<th>preference for {a}, 95% CI</th><th>difference {a} - {b}</th><th>df</th>"
            "<th>p (no difference)</th><th>p (non-inferiority)</th><th>generalises to</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>" + note
        )
    lead = (
        "<p><b>Which interval to report:</b> ORH random raters, random queries (RRRC) is the "
        "one that speaks for new raters and new queries; Wilson treats every vote as "
        "independent and is too narrow when raters share queries.</p>"
    )
    return '<div id="analysis-mrmc">' + lead + "".join(blocks) + "</div>"


def precision_html(precision: dict[str, Any] | None) -> str:
    """The running study's precision: the CI half-width now and the items still needed."""
    if not precision:
        return ""
    text = (
        f"Precision so far: the 95% CI of the preference rate is ±{_sig(precision['half_width'])}"
        f" ({html.escape(precision['source'])})."
    )
    if precision.get("note"):
        text += " " + html.escape(precision["note"])
    if precision.get("plan_sentence"):
        text += " At the observed preference: " + html.escape(precision["plan_sentence"])
        if precision.get("items_needed") is not None:
            text += f" Items still needed: <b>{precision['items_needed']}</b>."
    return f'<div id="analysis-precision">{text}</div>'


def analyse(
    services: Services,
    study_id: Any,
    min_gold_accuracy: float | None = None,
    ties: str = "half",
    margin: float | None = None,
):
    """(overview html, rates table, Bradley-Terry table, stratum figure, rater quality table,
    MRMC html) for one study; with `min_gold_accuracy` > 0 (a fraction, as in the CLI's
    --min-gold-accuracy), raters below that gold accuracy
    are excluded from rates, Bradley-Terry, bias and MRMC (agreement is shown with and
    without them). `ties` and `margin`: the MRMC figure of merit and non-inferiority margin."""
    nothing = (None, None, None, None, "")
    if study_id in (None, ""):
        return ui.notice_html("info", "Pick a study."), *nothing
    try:
        votes = services.studies.votes(int(study_id))
    except ValueError as error:
        return ui.notice_html("error", str(error)), *nothing
    if votes.empty:
        return ui.notice_html("info", "No votes in this study yet."), *nothing

    try:
        threshold = fraction(min_gold_accuracy, "gold accuracy threshold") or None
    except ValueError as error:
        return ui.notice_html("error", str(error)), *nothing
    margin = float(margin) if margin else None
    summary = services.studies.summarise(
        int(study_id), votes, min_gold_accuracy=threshold,
        ties=ties if ties in ("half", "exclude") else "half",
        margin=margin if margin is not None and 0 < margin < 1 else None,
    )  # fmt: skip
    bt = strengths_table(summary["bradley_terry"])
    compared = services.studies.compared(votes, summary["excluded_raters"])
    rates = pd.DataFrame(summary["rates"])
    return (
        overview_html(summary) + precision_html(summary.get("precision")),
        rates_table(rates) if len(rates) else None,
        bt,
        services.studies.stratum_figure(compared) if len(compared) else None,
        quality_table(summary["raters"]),
        mrmc_html(summary["mrmc"]) + quality_html(summary),
    )


def quality_html(summary: dict[str, Any]) -> str:
    """Flagged raters (outlier test, speeders, straight-liners), the RRRC result without them,
    the fragility figure and the admin's confirmed exclusions."""
    parts = ["<h4>Vote quality</h4>"]
    if summary.get("confirmed_exclusions"):
        ids = ", ".join(map(str, summary["confirmed_exclusions"]))
        parts.append(f"<div>Excluded by an admin (logged, votes kept): rater(s) {ids}.</div>")
    flagged = [row for row in summary.get("flags") or [] if row.get("flags")]
    if flagged:
        items = "".join(
            f"<li>rater {html.escape(str(row['rater']))}: {html.escape(row['flags'])} "
            f"(outlier p {_p_text(row.get('outlier_p'))}, median "
            f"{_sig(row.get('median_seconds'))} s, same choice "
            f"{_sig(100 * (row.get('same_choice_share') or 0))}%)</li>"
            for row in flagged
        )
        parts.append(
            f"<div>Flagged for review (exclude below to leave them out):<ul>{items}</ul></div>"
        )
    else:
        parts.append("<div>No rater is flagged (outlier test, speed, straight-lining).</div>")
    readings = {
        "without_flagged": "Without the flagged raters",
        "one_rater_per_client": "Counting the {n} raters who enrolled from a shared client as one "
        "rater per client",
    }
    for row in sensitivity_results(summary):
        parts.append(
            f"<div>{readings[row['reading']].format(n=row['n_raters'])}, RRRC preference for "
            f"{html.escape(str(row['model_a']))}: "
            f"{_percent(row['preference'], row['lo'], row['hi'])}.</div>"
        )
    # a reading that applies is never left out silently
    parts += [f"<div>{html.escape(row['sentence'])}</div>" for row in sensitivity_gaps(summary)]
    for row in summary.get("fragility") or []:
        if row.get("preferred"):
            parts.append(
                f"<div>Fragility: removing <b>{row['fragility']}</b> of {row['n']} votes would "
                f"leave {html.escape(str(row['preferred']))} no longer preferred.</div>"
            )
    return '<div id="analysis-quality">' + "".join(parts) + "</div>"


def exclude_rater(
    services: Services, study_id: Any, rater_id: Any, reason: str, reinstate: bool
) -> str:
    """Log an admin's exclusion (or reinstatement) of a rater; the caller checks admin."""
    if study_id in (None, "") or rater_id in (None, ""):
        return ui.notice_html("error", "Pick a study and give the rater id.")
    try:
        services.studies.exclude_rater(
            int(study_id), int(rater_id), reason or "", "admin", reinstate
        )
    except (StudyError, ValueError) as error:
        return ui.notice_html("error", str(error))
    action = "reinstated" if reinstate else "excluded"
    return ui.notice_html(
        "info", f"Rater {int(rater_id)} {action} (logged; no vote is deleted). Refresh to see it."
    )


def strengths_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Bradley-Terry strengths at 3 significant digits (they printed with 16)."""
    frame = pd.DataFrame(records)
    for column in frame.columns:
        if column not in ("model", "rank") and pd.api.types.is_float_dtype(frame[column]):
            frame[column] = [_sig(v) for v in frame[column]]
    return frame


EXPORT_PATH = "/study-export"
# ASCII digits in the store's integer range (str.isdigit also takes '٢' and then int() fails)
STUDY_ID = re.compile(r"[0-9]{1,9}")
EXPORTS = {
    "votes": "the votes, one row per vote",
    "mrmc": "the MRMC input (reader, case, modality, score) for iMRMC, RJafroc, MRMCaov",
}


def export_bytes(services: Services, study_id: Any, kind: str = "votes") -> bytes | None:
    """A study's export as CSV bytes, made in memory for one admin's download (never written
    to a file: a file in a shared temporary folder outlives the session and can be read by
    anyone on the machine). None for no study or an unknown kind."""
    if study_id in (None, "") or kind not in EXPORTS:
        return None
    return services.studies.export_csv(int(study_id), kind)


def export_links(study_id: Any) -> str:
    """Links to the admin-only export route (the cookie is checked there, on every request)."""
    if study_id in (None, ""):
        return ""
    links = " · ".join(
        f'<a href="{EXPORT_PATH}/{int(study_id)}/{kind}.csv" download '
        f'id="analysis-export-{kind}">Download {html.escape(what)} (CSV)</a>'
        for kind, what in EXPORTS.items()
    )
    return f'<div id="analysis-exports">{links}</div>'


def add_export_routes(app: Any, services: Services, auth: Any) -> None:
    """GET /study-export/<id>/<kind>.csv: the CSV for a signed-in admin (checked on each
    request from the cookie), 403 for anyone else; never cached by the browser or a proxy."""

    @app.get(EXPORT_PATH + "/{study_id}/{name}", include_in_schema=False)
    def study_export(study_id: str, name: str, request: Request) -> Response:
        headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
        if auth is None or not auth.is_admin(request):
            return Response(ADMIN_ONLY, status_code=403, media_type="text/plain", headers=headers)
        kind = name.removesuffix(".csv")
        if not STUDY_ID.fullmatch(study_id) or kind not in EXPORTS or not name.endswith(".csv"):
            return Response("No such export.", status_code=404, headers=headers)

        try:
            body = export_bytes(services, int(study_id), kind)
        except (StudyError, ValueError) as error:
            return Response(str(error), status_code=404, media_type="text/plain", headers=headers)
        headers["Content-Disposition"] = f'attachment; filename="study-{study_id}-{kind}.csv"'
        return Response(body, media_type="text/csv; charset=utf-8", headers=headers)


ADMIN_ONLY = "Study analysis is for admins only while studies run: sign in as admin to see it."
NO_ADMIN = (
    "This server has no admin, and study results are for admins only, so nobody can open "
    "them here (the demo study's included). To read them, give the server an admin and "
    "restart it: set the <code>ADMIN_PASSWORD</code> secret (on a Space: Settings, Variables "
    "and secrets), then sign in from the Admin tab that appears; or, on a Space, "
    "add <code>hf_oauth: true</code> to its README header and list Hugging Face user names in "
    "<code>ADMIN_USERS</code>, then sign in with Hugging Face in the Admin tab. Where you have "
    "a shell on the data folder, <code>python -m medheb_app study analyse</code> reads the "
    "same votes (docs/study.md, Reading the results)."
)


def sign_in_html(services: Services, auth: Any = None) -> str:
    """How to reach Study analysis on this server: the admin sign-ins it offers (password at
    /auth/admin, Hugging Face in the Admin tab), or, where it has no admin at all (no
    ADMIN_PASSWORD, no ADMIN_USERS on a Space with OAuth), what to configure."""
    if auth is None or not services.admin_enabled:
        return _note(NO_ADMIN)
    ways = []
    if services.settings.admin_password:
        ways.append('<a href="/auth/admin" id="analysis-sign-in">sign in as admin</a>')
    if getattr(auth, "admin_users", None):
        ways.append("sign in with Hugging Face in the Admin tab (users in ADMIN_USERS)")
    return _note(
        "Study results are for admins only while studies run: "
        + " or ".join(ways)
        + ", then pick a study."
    )


def _note(markup: str) -> str:
    """An info box around trusted markup of this module (links; no user text)."""
    return (
        f'<div class="medheb-notice info" role="status" id="analysis-sign-in-note">{markup}</div>'
    )


def build_analysis_tab(services: Services, auth: Any = None) -> dict[str, Any]:
    with gr.Row():
        study = gr.Dropdown(label="Study", choices=[], elem_id="analysis-study")
        refresh = gr.Button("Refresh", size="sm")
    min_gold = gr.Number(
        label=f"Exclude raters below this gold accuracy ({GOLD_ACCURACY_HELP}; 0 keeps everyone)",
        value=0,
        minimum=0,
        maximum=1,
        step=0.05,
        elem_id="analysis-min-gold",
    )
    signed_out = sign_in_html(services, auth)
    overview = gr.HTML(signed_out)
    with gr.Row():
        ties = gr.Dropdown(
            label="MRMC: a tie or 'both poor' counts",
            choices=[("half for each model", "half"), ("not at all (left out)", "exclude")],
            value="half",
            elem_id="analysis-ties",
        )
        margin = gr.Number(
            label="Non-inferiority margin on the difference (0 = none; e.g. 0.1)",
            value=0,
            minimum=0,
            maximum=0.99,
            elem_id="analysis-margin",
        )
    mrmc = gr.HTML(elem_id="analysis-mrmc-block")
    with gr.Row():
        exclude_id = gr.Number(label="Rater id", precision=0, elem_id="analysis-exclude-rater")
        exclude_reason = gr.Textbox(label="Why (kept in the log)", elem_id="analysis-reason")
        exclude_button = gr.Button("Exclude rater", size="sm", elem_id="analysis-exclude")
        reinstate_button = gr.Button("Reinstate rater", size="sm")
    exclude_note = gr.HTML()
    quality = gr.Dataframe(label="Raters: gold accuracy, median seconds per item, side bias")
    rates = gr.Dataframe(label="Preference rates by top-1 stratum (95% Wilson CI)")
    bt = gr.Dataframe(label="Bradley-Terry strengths (bootstrap intervals)")
    figure = gr.Plot(label="Outcomes by stratum")
    download = gr.HTML("", elem_id="analysis-download")

    def _admin(request: Any) -> bool:
        return auth is not None and auth.is_admin(request)

    def _refresh(current=None, request: gr.Request = None):
        if not _admin(request):
            return gr.update(choices=[], value=None)
        choices = study_options(services)
        ids = [value for _, value in choices]
        return gr.update(choices=choices, value=current if current in ids else (ids or [None])[0])

    def _show(study_id, threshold, request: gr.Request):
        if not _admin(request):
            return signed_out, None, None, None, None, "", None
        return (*analyse(services, study_id, threshold), export_links(study_id))

    def _show_mrmc(study_id, threshold, tie_rule, ni_margin, request: gr.Request):
        """The MRMC block again under the chosen tie rule and margin (admins only)."""
        if not _admin(request):
            return ""
        return analyse(services, study_id, threshold, tie_rule, ni_margin)[5]

    shown = [overview, rates, bt, figure, quality, mrmc, download]
    mrmc_inputs = [study, min_gold, ties, margin]
    for event in (study.change, min_gold.submit):
        event(_show, [study, min_gold], shown, api_visibility="private").then(
            _show_mrmc, mrmc_inputs, [mrmc], api_visibility="private"
        )

    def _exclude(study_id, rater_id, reason, request: gr.Request):
        if not _admin(request):
            return ui.notice_html("info", ADMIN_ONLY)
        return exclude_rater(services, study_id, rater_id, reason, False)

    def _reinstate(study_id, rater_id, reason, request: gr.Request):
        if not _admin(request):
            return ui.notice_html("info", ADMIN_ONLY)
        return exclude_rater(services, study_id, rater_id, reason, True)

    decision = [study, exclude_id, exclude_reason]
    exclude_button.click(_exclude, decision, [exclude_note], api_visibility="private")
    reinstate_button.click(_reinstate, decision, [exclude_note], api_visibility="private")
    ties.change(_show_mrmc, mrmc_inputs, [mrmc], api_visibility="private")
    margin.submit(_show_mrmc, mrmc_inputs, [mrmc], api_visibility="private")
    refresh.click(_refresh, [study], [study], api_visibility="private").then(
        _show, [study, min_gold], shown, api_visibility="private"
    ).then(_show_mrmc, mrmc_inputs, [mrmc], api_visibility="private")
    return {"study": study, "overview": overview, "refresh_studies": _refresh}
