"""Sign-ins that survive a restart and a second replica, and end on sign-out everywhere
(issue 19 item 7, issue 18 item 9).

Two real app processes serve one DATA_DIR and one database (started at the same moment, so
they also race to create the session secret). Admin sign-in happened in process memory
before: every restart signed admins out, two replicas disagreed, and a kept copy of a rater
cookie still loaded items and recorded votes after its rater signed out.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from medheb_app.services import create_services
from medheb_app.settings import Settings
from tests.run_fixtures import text_bench_run
from tests.web_client import (
    QueueClient,
    fn_index,
    free_port,
    start_app_process,
    wait_until_serving,
)

PASSWORD = "replica-admin-pass-9"


def _start(data_dir: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "DATA_DIR": str(data_dir), "ADMIN_PASSWORD": PASSWORD}
    env.pop("SESSION_SECRET", None)
    return start_app_process(port, env, log.open("a")), f"http://127.0.0.1:{port}"


def _stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
        process.wait(timeout=30)


@pytest.fixture
def world(tmp_path):
    """A study with one invitation in DATA_DIR's database, and the fn_index of the rater
    page's handlers (the same code builds the same Blocks in every process)."""
    from medheb_app.study import create_invitations, create_study
    from medheb_app.tasks.base import Item
    from medheb_app.ui.server import build_server

    data_dir = tmp_path / "data"
    settings = Settings.from_env(data_dir=data_dir, admin_password=PASSWORD)
    services = create_services(settings, start_bootstrap=False)
    pairs = [(Item(f"q{i}", f"w{i} w{i + 1}"), Item(f"t{i}", f"w{i} target")) for i in range(6)]
    summary = text_bench_run("tt-replica", pairs, tmp_path / "bench", settings)
    study_id = create_study(
        services.store, "replica-study", ["random", "oracle"], summary.out_dir, n_items=3, seed=0
    ).id
    invitation = create_invitations(services.store, study_id, 1)[0]
    rate = build_server(services).state.blocks["rate"]
    services.jobs.shutdown(wait=False)
    (data_dir / ".session-secret").unlink(missing_ok=True)  # the replicas race to create it
    return {
        "data_dir": data_dir,
        "services": services,
        "study_id": study_id,
        "invitation": invitation,
        "show": fn_index(rate, "build_rater_app.<locals>.show"),
        "vote": fn_index(rate, "make_vote.<locals>.vote"),
        "vote_inputs": len(rate.fns[fn_index(rate, "make_vote.<locals>.vote")].inputs),
        "log": tmp_path / "apps.log",
    }


def _is_admin(base: str, cookies: dict) -> bool:
    """GET /auth/admin sends a signed-in admin on to the workbench (303), others get the form."""
    reply = httpx.get(f"{base}/auth/admin", cookies=cookies, timeout=30)
    return reply.status_code == 303


def _replica_client(base: str, cookies: dict, session_hash: str | None = None) -> QueueClient:
    client = QueueClient(base, session_hash)
    client.http.cookies.update(cookies)
    return client


@pytest.mark.slow  # three app processes started (~12 s)
def test_two_replicas_share_sign_ins_across_restarts_and_sign_out(world):
    from medheb_app.study.export import votes_frame

    log = world["log"]
    (a, base_a), (b, base_b) = _start(world["data_dir"], log), _start(world["data_dir"], log)
    try:
        wait_until_serving(a, base_a, 180, log)
        wait_until_serving(b, base_b, 180, log)
        admin = QueueClient(base_a)
        assert admin.post_form("/auth/admin", {"password": PASSWORD}).status_code == 303
        admin_cookies = dict(admin.http.cookies)
        assert _is_admin(base_a, admin_cookies) and _is_admin(base_b, admin_cookies)

        rater = QueueClient(base_a)
        assert rater.http.get(world["invitation"].link).status_code == 303
        rater_cookies = dict(rater.http.cookies)
        on_b = _replica_client(base_b, rater_cookies)
        shown = str(on_b.call(world["show"], [], prefix="/rate"))
        assert "candidate" in shown or "Query" in shown, shown[-500:]

        _stop(a, signal.SIGKILL)  # a crash: nothing in A's memory survives
        a, base_a = _start(world["data_dir"], log)
        wait_until_serving(a, base_a, 180, log)
        assert _is_admin(base_a, admin_cookies)  # still signed in after the restart

        # the rater loads an item on the restarted A (its token is kept in that session)...
        kept = _replica_client(base_a, rater_cookies)
        assert "Query" in str(kept.call(world["show"], [], prefix="/rate"))
        # ... then signs out on B; the admin too
        signed_out = httpx.get(
            f"{base_b}/auth/signout", cookies={**admin_cookies, **rater_cookies}, timeout=30
        )
        assert signed_out.status_code == 200
        assert not _is_admin(base_a, admin_cookies) and not _is_admin(base_b, admin_cookies)

        votes_before = len(votes_frame(world["services"].store, world["study_id"]))
        # the kept cookie replayed on A, in the session that holds the item's token
        values = [None, "", ""] + [None] * (world["vote_inputs"] - 3)
        voted = str(kept.call(world["vote"], values, prefix="/rate"))
        assert "Vote recorded" not in voted and "signed" in voted, voted[-400:]
        again = str(kept.call(world["show"], [], prefix="/rate"))
        assert "Query" not in again and "You signed out" in again, again[-400:]
        assert "/auth/rater" in again and "sign in with its code</a>" in again  # a link
        assert "&lt;a href" not in again, again[-400:]  # not its escaped text
        assert len(votes_frame(world["services"].store, world["study_id"])) == votes_before

        # the server tells "signed out" apart from a cookie it never issued
        from medheb_app.access.auth import Authenticator, load_secret
        from medheb_app.access.sessions import StoreSessions

        auth = Authenticator(
            load_secret(world["data_dir"]), sessions=StoreSessions(world["services"].store)
        )
        replay = type("R", (), {"cookies": rater_cookies})()
        assert auth.rater_state(replay) == "signed out"
        assert auth.rater_state(type("R", (), {"cookies": {"medheb_rater": "x" * 40}})()) == (
            "unknown"
        )
    finally:
        _stop(a)
        _stop(b)
