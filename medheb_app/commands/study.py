"""`python -m medheb_app study ...`: create, invite raters to, list, close, export and analyse
blinded preference studies (MedHEB section 5.6). Raters vote in the web app (/rate) with the
invitation link or code these commands print; these commands are the admin's side, and call
the admin tabs' facade (services.studies) on the same store."""

from __future__ import annotations

import argparse
from typing import Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.services.store import open_store
from medheb_app.services.studies import (
    PAYLOAD_KINDS,
    Studies,
    creation_note,
    item_counts,
    sensitivity_gaps,
    sensitivity_results,
)
from medheb_app.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("study", help="blinded two-model preference studies")
    actions = parser.add_subparsers(dest="study_command", required=True)

    create = actions.add_parser("create", help="sample items from a benchmark run directory")
    create.add_argument("--run", required=True, help="a `bench run --out` directory")
    create.add_argument(
        "--model", action="append", required=True, help="model spec to compare (2 or more)"
    )
    create.add_argument(
        "--n", type=int, required=True, help="queries to sample, stratified across tasks"
    )
    create.add_argument("--raters", type=int, default=1, help="raters per item (default 1)")
    create.add_argument("--name", required=True, help="a unique internal study name (admin only)")
    create.add_argument(
        "--public-title",
        default="",
        help="the title raters see (never the internal name; must not name the models)",
    )
    create.add_argument(
        "--open-enrolment",
        action="store_true",
        help="anyone may join with a display name (a fresh rater per sign-in); default: "
        "invitation only (`study invite`)",
    )
    create.add_argument(
        "--gold-share",
        type=float,
        default=0.0,
        help="share of quality-control items (reference vs random list), a fraction from 0 to "
        "0.5: 0.1 = 10%% of the items, as in the UI",
    )
    create.add_argument(
        "--claim-timeout",
        type=float,
        default=600.0,
        help="seconds an unvoted item stays held for its rater (default 600)",
    )
    create.add_argument(
        "--max-votes-per-rater",
        type=int,
        default=0,
        help="cap on each rater's votes (default 0: no cap), so no rater dominates the result",
    )
    create.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    reveal = create.add_mutually_exclusive_group()
    reveal.add_argument(
        "--reveal",
        action="store_true",
        help="show model names after each vote (off by default: a reveal teaches a rater "
        "each model's look, so later items' sides become guessable)",
    )
    reveal.add_argument(
        "--no-reveal", action="store_true", help="never show model names (the default)"
    )
    create.add_argument(
        "--payloads",
        choices=PAYLOAD_KINDS,
        default="auto",
        help="what raters see for each id: 'tasks' rebuilds the run's suite tasks and renders "
        "their texts, images, volumes and regions (files in DATA_DIR/study-media), 'none' "
        "only the payloads in the run files (texts, image files, thumbnails, SYNTHETIC "
        "marks), 'auto' (default) tasks when the run folder has a summary.json, or the run "
        "files' payloads when its tasks were made in code (suite 'custom': the demo's own "
        "run, runs/demo-showcase); queries that cannot be rendered are withheld",
    )
    add_json_flag(create)
    create.set_defaults(handler=run_create)

    listing = actions.add_parser("list", help="studies with their item and vote counts")
    add_json_flag(listing)
    listing.set_defaults(handler=run_list)

    invite = actions.add_parser(
        "invite", help="issue rater invitations (links and codes are printed once)"
    )
    invite.add_argument("--study", required=True, help="study name or id")
    invite.add_argument("--n", type=int, required=True, help="how many invitations")
    invite.add_argument("--label", default="", help="a note to tell them apart later")
    add_json_flag(invite)
    invite.set_defaults(handler=run_invite)

    invitations = actions.add_parser(
        "invitations", help="a study's invitations: used, revoked (no secrets)"
    )
    invitations.add_argument("--study", required=True, help="study name or id")
    add_json_flag(invitations)
    invitations.set_defaults(handler=run_invitations)

    revoke = actions.add_parser(
        "revoke", help="revoke an invitation: its rater stops, their votes are kept"
    )
    revoke.add_argument("--invitation", type=int, required=True, help="invitation id")
    add_json_flag(revoke)
    revoke.set_defaults(handler=run_revoke)

    close = actions.add_parser("close", help="close a study to raters (or --reopen it)")
    close.add_argument("--study", required=True, help="study name or id")
    close.add_argument("--reopen", action="store_true", help="open a closed study again")
    add_json_flag(close)
    close.set_defaults(handler=run_close)

    export = actions.add_parser("export", help="write the votes in force to a CSV file")
    export.add_argument("--out", required=True, help="CSV file to write")
    export.add_argument("--study", default=None, help="study name or id (default: all)")
    export.add_argument(
        "--format",
        choices=("votes", "mrmc"),
        default="votes",
        help="'votes' (default): one row per vote; 'mrmc': reader, case, modality, score rows "
        "for iMRMC / RJafroc / MRMCaov (docs/study.md)",
    )
    export.add_argument(
        "--ties", choices=("half", "exclude"), default="half", help="MRMC scores of ties"
    )
    add_json_flag(export)
    export.set_defaults(handler=run_export)

    plan = actions.add_parser(
        "plan", help="how many items a study needs (expected preference, raters, ICC, power)"
    )
    plan.add_argument(
        "--preference", type=float, default=None,
        help="expected true preference rate for one model, e.g. 0.65 (default with --pilot: "
        "the pilot's observed rate)",
    )  # fmt: skip
    plan.add_argument("--raters", type=int, default=None, help="number of raters")
    plan.add_argument("--votes-per-item", type=int, default=1, help="raters per item (1)")
    plan.add_argument("--icc-query", type=float, default=None, help="ICC of votes by query")
    plan.add_argument("--icc-rater", type=float, default=None, help="ICC of votes by rater")
    plan.add_argument("--alpha", type=float, default=0.05, help="two-sided level (0.05)")
    plan.add_argument("--power", type=float, default=0.8, help="power (0.8)")
    plan.add_argument(
        "--pilot", default=None, help="a pilot study (name or id) to take the ICCs from"
    )
    add_json_flag(plan)
    plan.set_defaults(handler=run_plan)

    exclude = actions.add_parser(
        "exclude",
        help="exclude a rater's votes from the analysis (logged, append-only; votes are kept)",
    )
    exclude.add_argument("--study", required=True, help="study name or id")
    exclude.add_argument("--rater", type=int, required=True, help="rater id (see analyse)")
    exclude.add_argument("--reason", default="", help="why (required to exclude)")
    exclude.add_argument("--reinstate", action="store_true", help="undo an exclusion (logged)")
    add_json_flag(exclude)
    exclude.set_defaults(handler=run_exclude)

    analyse = actions.add_parser(
        "analyse", aliases=["analyze"], help="preference rates, Bradley-Terry, agreement, bias"
    )
    analyse.add_argument("--study", default=None, help="study name or id (default: all)")
    analyse.add_argument("--boot", type=int, default=200, help="bootstrap resamples (200)")
    analyse.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    analyse.add_argument(
        "--min-gold-accuracy",
        type=float,
        default=None,
        help="exclude raters below this accuracy on gold items, a fraction from 0 to 1: "
        "0.8 = 80%%, as in the UI",
    )
    analyse.add_argument(
        "--ties",
        choices=("half", "exclude"),
        default="half",
        help="MRMC figure of merit: a tie or 'both poor' counts half for each model (default) "
        "or is left out",
    )
    analyse.add_argument(
        "--margin",
        type=float,
        default=None,
        help="non-inferiority margin on the difference pref(a) - pref(b), e.g. 0.1: a one-sided "
        "test that a is not worse than b by more than this",
    )
    add_json_flag(analyse)
    analyse.set_defaults(handler=run_analyse)


def _studies(settings: Settings) -> Studies:
    """The studies facade on the settings' store (no job runner, no demo bootstrap)."""
    return Studies(settings, open_store(settings))


def run_create(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    if args.n < 1:
        raise UserError(f"--n must be at least 1; got {args.n}.")
    studies = _studies(settings)
    created = studies.create_from_folder(
        args.name,
        args.model,
        args.run,
        args.payloads,
        n_items=args.n,
        raters_per_item=args.raters,
        reveal_after_vote=bool(args.reveal),
        seed=args.seed,
        public_title=args.public_title,
        open_enrolment=args.open_enrolment,
        gold_share=args.gold_share,
        claim_timeout_s=args.claim_timeout,
        max_votes_per_rater=args.max_votes_per_rater,
    )
    study = next(s for s in studies.list() if s["id"] == created.id)
    study["withheld"] = created.withheld
    human = (
        f"Created study '{study['name']}' (id {created.id}), shown to raters as "
        f"'{study['public_title']}': {item_counts(created.n_items, created.n_gold)} comparing "
        f"{', '.join(study['models'])}, {args.raters} rater(s) per item."
    )
    if created.withheld:
        human += f"\n{len(created.withheld)} query(ies) withheld (cannot be shown to raters):"
        human += "".join(
            f"\n  {w['task']} {w['query_id']}: {w['reason']}" for w in created.withheld[:20]
        )
    human += "\n" + creation_note(created.n_items, args.raters)
    if args.open_enrolment:
        human += "\nOpen enrolment: raters join on /rate with any display name."
    else:
        human += f"\nInvite raters with: study invite --study {created.id} --n <count>"
    return human, study


def run_list(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    studies = _studies(settings).list()
    lines = [
        f"{s['id']:>3}  {s['name']}  '{s['public_title']}'  "
        f"{item_counts(s['n_items'], s['n_gold'])}  votes={s['votes']}  "
        f"raters/item={s['raters_per_item']}  "
        f"models={', '.join(s['models'])}"
        + ("  open-enrolment" if s["open_enrolment"] else "")
        + ("  CLOSED" if s["closed"] else "")
        for s in studies
    ]
    return "\n".join(lines) or "No studies yet (create one with `study create`).", {
        "studies": studies
    }


def run_export(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    rows = _studies(settings).export_file(args.out, args.study, args.format, args.ties)
    if args.format == "mrmc":
        text = f"Wrote {rows} MRMC row(s) (reader, case, modality, score) to {args.out}."
        return text, {"out": str(args.out), "rows": rows, "format": "mrmc"}
    return f"Wrote {rows} vote(s) to {args.out}.", {"out": str(args.out), "rows": rows}


def run_invite(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    studies = _studies(settings)
    study = studies.find(args.study)
    issued = studies.invite(study.id, args.n, args.label)
    lines = [
        f"{len(issued)} invitation(s) to study {study.id} ('{study.public_title}'). Each is shown "
        "only now: give every rater one link or code, and keep them secret.",
        "",
        f"{'id':>5}  {'code':<10} link (append to the app's address)",
    ]
    lines += [f"{i.id:>5}  {i.code:<10} {i.link}" for i in issued]
    data = {
        "study": study.id,
        "invitations": [
            {"id": i.id, "code": i.code, "link": i.link, "secret": i.secret, "label": i.label}
            for i in issued
        ],
    }
    return "\n".join(lines), data


def run_invitations(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    studies = _studies(settings)
    study = studies.find(args.study)
    rows = studies.invitations(study.id)
    records = [
        {
            "id": i.id,
            "label": i.label,
            "created_at": i.created_at.isoformat(timespec="seconds"),
            "used": i.used,
            "revoked": i.revoked,
            "rater_id": i.rater_id,
            "display_name": i.display_name,
        }
        for i in rows
    ]
    lines = [
        f"{r['id']:>5}  {'revoked' if r['revoked'] else 'used' if r['used'] else 'unused':<8} "
        f"rater={r['rater_id'] or '-'} {r['display_name']}  {r['label']}  {r['created_at']}"
        for r in records
    ]
    human = "\n".join(lines) or f"No invitations for study {study.id} yet (`study invite`)."
    return human, {"study": study.id, "invitations": records}


def run_revoke(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    info = _studies(settings).revoke_invitation(args.invitation)
    who = f" (rater {info.rater_id}, {info.display_name})" if info.rater_id else ""
    human = f"Revoked invitation {info.id}{who}; their votes so far are kept."
    return human, {"id": info.id, "revoked": True, "rater_id": info.rater_id}


def run_close(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    studies = _studies(settings)
    study = studies.find(args.study)
    studies.close(study.id, closed=not args.reopen)
    state = "reopened" if args.reopen else "closed"
    return f"Study {study.id} {state}.", {"study": study.id, "closed": not args.reopen}


def run_analyse(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    if args.boot < 0:
        raise UserError(f"--boot must be 0 or more; got {args.boot}.")
    if args.min_gold_accuracy is not None and not 0 <= args.min_gold_accuracy <= 1:
        raise UserError(
            f"--min-gold-accuracy must be between 0 and 1; got {args.min_gold_accuracy}."
        )
    if args.margin is not None and not 0 < args.margin < 1:
        raise UserError(f"--margin must be between 0 and 1; got {args.margin}.")
    studies = _studies(settings)
    votes = studies.votes(args.study)
    summary = studies.summarise(
        args.study, votes, n_boot=args.boot, seed=args.seed,
        min_gold_accuracy=args.min_gold_accuracy, ties=args.ties, margin=args.margin,
    )  # fmt: skip
    return format_summary(summary), summary


def _pct(value: float | None) -> str:
    return "  n/a" if value is None else f"{100 * value:5.1f}"


def format_summary(summary: dict[str, Any]) -> str:
    """The analysis as plain text: rates per pair and stratum, BT, agreement, position bias."""
    if not summary["n_votes"]:
        return "No votes yet."
    lines = [
        f"{summary['n_votes']} votes on {summary['n_items']} items by "
        f"{summary['n_raters']} rater(s). Rates in % with Wilson 95% CI."
    ]
    unjudged = summary.get("cannot_judge") or {}
    if unjudged.get("n"):
        reasons = ", ".join(f"{k} {v}" for k, v in unjudged["reasons"].items())
        lines.append(f"{unjudged['n']} more vote(s) could not judge ({reasons}); left out.")
    for row in summary["rates"]:
        if row["stratum"] == "all":
            lines += ["", f"{row['model_a']} (a) vs {row['model_b']} (b)"]
        if not row["n"]:
            continue  # an empty stratum has nothing to say
        cells = "  ".join(
            f"{name} {_pct(row[f'{key}_rate'])} [{_pct(row[f'{key}_lo'])}-{_pct(row[f'{key}_hi'])}]"
            for key, name in (("a", "a"), ("b", "b"), ("tie", "tie"), ("both_poor", "both poor"))
        )
        lines.append(f"  {row['stratum']:<9} n={row['n']:<4} {cells}")
    if summary["bradley_terry"]:
        lines += ["", f"Bradley-Terry strength (95% bootstrap CI; {summary['ties']}):"]
        for row in summary["bradley_terry"]:
            lo = "n/a" if row["lo"] is None else f"{row['lo']:.2f}"
            hi = "n/a" if row["hi"] is None else f"{row['hi']:.2f}"
            lines.append(f"  {row['rank']}. {row['model']}: {row['strength']:.2f} [{lo}, {hi}]")
    agreement = summary["agreement"]
    if agreement["method"]:
        kappa = "n/a" if agreement["kappa"] is None else f"{agreement['kappa']:.3f}"
        lines.append(
            f"\nAgreement ({agreement['method']} kappa) on {agreement['n_items']} shared items: "
            f"{kappa}"
        )
    else:
        lines.append("\nAgreement: no item was rated by two or more raters.")
    if summary.get("excluded_raters"):
        kept = summary["agreement_kept"]
        kappa = "n/a" if kept["kappa"] is None else f"{kept['kappa']:.3f}"
        lines.append(
            f"Excluded {len(summary['excluded_raters'])} rater(s) below "
            f"{summary['min_gold_accuracy']:.0%} gold accuracy (ids "
            f"{', '.join(map(str, summary['excluded_raters']))}); agreement without them: "
            f"{kept['method'] or 'none'} kappa {kappa}."
        )
    raters = summary.get("raters") or []
    if raters:
        lines += ["", f"Raters ({summary.get('n_gold_votes', 0)} gold votes):"]
        for row in raters:
            accuracy = "n/a" if row["gold_accuracy"] is None else f"{row['gold_accuracy']:.0%}"
            seconds = "n/a" if row["median_seconds"] is None else f"{row['median_seconds']:.0f}s"
            side = "n/a" if row["side_a_share"] is None else f"{row['side_a_share']:.0%}"
            lines.append(
                f"  rater {row['rater']}: {row['n_votes']} votes, gold {accuracy} of "
                f"{row['n_gold']}, median {seconds} per item, side A {side}"
            )
    bias = summary["position_bias"]
    if bias["n"]:
        lines.append(
            f"Position bias: left list chosen in {_pct(bias['left_rate']).strip()}% of "
            f"{bias['n']} A/B votes (binomial p = {bias['p_value']:.3g} vs 50%)."
        )
    lines += mrmc_lines(summary.get("mrmc") or [])
    lines += precision_lines(summary.get("precision"))
    lines += quality_lines(summary)
    return "\n".join(lines)


def precision_lines(precision: dict[str, Any] | None) -> list[str]:
    """The running study's precision: the CI half-width now and the items still needed."""
    if not precision:
        return []
    lines = [
        "",
        f"Precision so far: the 95% CI of the preference rate is +-{precision['half_width']:.3g} "
        f"({precision['source']}).",
    ]
    if precision.get("note"):
        lines.append(f"  {precision['note']}")
    if precision.get("plan_sentence"):
        lines.append(f"  At the observed preference: {precision['plan_sentence']}")
        if precision.get("items_needed") is not None:
            lines.append(f"  Items still needed: {precision['items_needed']}.")
    return lines


MRMC_NAMES = {
    "RRRC": "ORH random raters, random queries",
    "FRRC": "ORH fixed raters, random queries",
    "RRFC": "ORH random raters, fixed queries",
    "bootstrap": "Cluster bootstrap (raters x queries)",
}


def _p(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "< 0.001" if value < 0.001 else f"{value:.3g}"


def mrmc_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """The MRMC section: per pair, the preference rate for a with each interval, the p-value
    of the difference (and of non-inferiority), and what each interval generalises to."""
    lines: list[str] = []
    for pair in pairs:
        lines += [
            "",
            f"MRMC: preference for {pair['model_a']} (a) over {pair['model_b']} (b), "
            f"{pair['n_readers']} raters x {pair['n_cases']} queries, ties {pair['ties']}; "
            "preference in %, 95% CI; difference = pref(a) - pref(b)",
        ]
        if pair.get("error"):
            lines.append(f"  {pair['error']}")
        for name, label in MRMC_NAMES.items():
            res = pair["results"].get(name)
            if res is None:
                continue
            df = "inf" if res["df"] is None else f"{res['df']:.3g}"
            ni = ""
            if res.get("margin") is not None:
                ni = f", non-inferiority (margin {res['margin']:.3g}) p {_p(res['ni_p_value'])}"
            lines.append(
                f"  {label}: {_pct(res['preference'])} [{_pct(res['preference_lo'])}-"
                f"{_pct(res['preference_hi'])}]"
                f"{' (cut at 0-100%: too few raters)' if res.get('preference_clipped') else ''}"
                f", difference {res['difference']:.3g} "
                f"[{res['lo']:.3g}, {res['hi']:.3g}], df {df}, p {_p(res['p_value'])}{ni}."
            )
            lines.append(f"      generalises to {res['generalises_to']}")
        wilson = pair["wilson"]
        if wilson.get("n"):
            lines.append(
                f"  Wilson (per vote, n={wilson['n']}): {_pct(wilson['preference'])} "
                f"[{_pct(wilson['lo'])}-{_pct(wilson['hi'])}]"
            )
            lines.append(f"      generalises to {wilson['generalises_to']}")
        if pair.get("dropped_raters"):
            lines.append(
                f"  Left out (fewer than 2 rated queries): rater(s) "
                f"{', '.join(map(str, pair['dropped_raters']))}"
            )
    return lines


def run_plan(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    preference, raters = args.preference, args.raters
    icc_query, icc_rater, source = args.icc_query, args.icc_rater, None
    pilot = None
    if args.pilot is not None:
        try:
            pilot = _studies(settings).pilot_estimates(args.pilot)
        except ValueError as error:
            raise UserError(str(error)) from None
        if preference is None and not 0 < pilot["preference"] < 1:
            raise UserError(
                f"Every compared vote of pilot study {args.pilot} prefers one side (observed "
                f"preference {pilot['preference']:.3g}), so it cannot size a study; give the "
                "preference you expect with --preference."
            )
        preference = preference if preference is not None else pilot["preference"]
        raters = raters if raters is not None else pilot["raters"]
        # the pilot's own estimates within [0, 0.99], as the analysis plans with them
        icc_query = Studies.planning_icc(pilot["icc_query"]) if icc_query is None else icc_query
        icc_rater = Studies.planning_icc(pilot["icc_rater"]) if icc_rater is None else icc_rater
        source = f"from pilot study {args.pilot}"
    if preference is None or raters is None:
        raise UserError("Give --preference and --raters (or --pilot STUDY).")
    try:
        sized = Studies.plan(
            preference, raters, votes_per_item=args.votes_per_item, icc_query=icc_query,
            icc_rater=icc_rater, alpha=args.alpha, power=args.power, icc_source=source,
        )  # fmt: skip
    except ValueError as error:
        raise UserError(str(error)) from None
    data = sized.to_dict() | {"pilot": pilot}
    return sized.sentence(), data


def quality_lines(summary: dict[str, Any]) -> list[str]:
    """Flagged raters, the result without them, the fragility figure and confirmed exclusions."""
    lines: list[str] = []
    if summary.get("confirmed_exclusions"):
        lines += [
            "",
            "Excluded by an admin (logged): rater(s) "
            + ", ".join(map(str, summary["confirmed_exclusions"])),
        ]
    flagged = [row for row in summary.get("flags") or [] if row.get("flags")]
    if flagged:
        lines += ["", "Flagged raters (review before excluding with `study exclude`):"]
        lines += [f"  rater {row['rater']}: {row['flags']}" for row in flagged]
    readings = {
        "without_flagged": "Without them",
        "one_rater_per_client": "One rater per enrolment client ({n} raters share clients)",
    }
    for row in sensitivity_results(summary):
        lines.append(
            f"  {readings[row['reading']].format(n=row['n_raters'])}, RRRC preference for "
            f"{row['model_a']}: {_pct(row['preference'])} [{_pct(row['lo'])}-{_pct(row['hi'])}]"
        )
    # a reading that applies is never left out silently
    lines += [f"  {row['sentence']}" for row in sensitivity_gaps(summary)]
    for row in summary.get("fragility") or []:
        if row.get("preferred"):
            lines.append(
                f"Fragility: removing {row['fragility']} of {row['n']} votes would leave "
                f"{row['preferred']} no longer preferred ({row['model_a']} vs {row['model_b']})."
            )
    return lines


def run_exclude(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    studies = _studies(settings)
    study = studies.find(args.study)
    studies.exclude_rater(study.id, args.rater, args.reason, "cli", args.reinstate)
    action = "reinstated" if args.reinstate else "excluded"
    return (
        f"Rater {args.rater} {action} in study {study.id} (logged; no vote is deleted).",
        {"study": study.id, "log": studies.exclusion_log(study.id)},
    )
