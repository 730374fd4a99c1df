"""Hugging Face sign-in for ADMIN_USERS must never be Gradio's local mock (issue 19, item 2).

Off the Space runtime Gradio serves `/login/huggingface` as a mock that signs any visitor in
as the owner of HF_TOKEN; with that owner in ADMIN_USERS any visitor became admin, and without
HF_TOKEN the same configuration crashed at start. Here the app is started with every partial
combination of the Space variables (in-process, and as `python app.py` for the attacker's
configurations from the issue), and once with all of them, against a local OpenID provider.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from medheb_app.access.auth import StartupRefused, oauth_available
from medheb_app.services import create_services
from medheb_app.settings import PROJECT_ROOT, Settings
from medheb_app.ui.server import build_server
from tests.web_client import serve

SPACE = {
    "SYSTEM": "spaces",
    "SPACE_ID": "someone/workbench",
    "OAUTH_CLIENT_ID": "client-id",
    "OAUTH_CLIENT_SECRET": "client-secret",
    "OAUTH_SCOPES": "openid profile",
    "OPENID_PROVIDER_URL": "",  # filled with the local provider's address
}


def _clear_space(monkeypatch) -> None:
    for name in (*SPACE, "SPACE_HOST", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def services(tmp_path):
    settings = Settings.from_env(data_dir=tmp_path / "data", admin_users=("alice",))
    made = create_services(settings, start_bootstrap=False)
    yield made
    made.jobs.shutdown(wait=False)


def test_every_partial_space_combination_is_refused_at_start(services, monkeypatch):
    """All 63 proper subsets of the six variables: a clear refusal naming what is missing."""
    names = list(SPACE)
    for size in range(len(names)):
        for subset in itertools.combinations(names, size):
            _clear_space(monkeypatch)
            monkeypatch.setenv("HF_TOKEN", "hf_owner_token")  # the mock would sign in as its owner
            for name in subset:
                monkeypatch.setenv(name, SPACE[name] or "http://127.0.0.1:9")
            assert not oauth_available()
            with pytest.raises(StartupRefused) as refused:
                build_server(services)
            message = str(refused.value)
            assert "ADMIN_USERS" in message and "ADMIN_PASSWORD" in message
            for name in set(names) - set(subset):
                assert name in message, (subset, message)


def _run_app(env: dict[str, str], data_dir: Path) -> subprocess.CompletedProcess:
    base = {key: value for key, value in os.environ.items() if key not in SPACE}
    base.pop("HF_TOKEN", None)
    base.update(DATA_DIR=str(data_dir), PORT="9", ADMIN_USERS="alice", **env)
    return subprocess.run(
        [sys.executable, "app.py"],
        cwd=PROJECT_ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "env",
    [
        # the configuration: "on a Space" by SPACE_ID + secret, HF_TOKEN's owner admin
        {"SPACE_ID": "u/app", "OAUTH_CLIENT_SECRET": "s", "HF_TOKEN": "hf_owner_token"},
        {"SPACE_ID": "u/app", "OAUTH_CLIENT_SECRET": "s"},  # crashed at start before
        {"SYSTEM": "spaces", "SPACE_ID": "u/app"},  # Gradio would raise on the missing id
    ],
    ids=["mock-with-token", "mock-without-token", "space-without-oauth"],
)
def test_app_py_refuses_with_one_line_not_a_traceback(env, tmp_path):
    done = _run_app(env, tmp_path / "data")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    assert "not starting: ADMIN_USERS is set" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was written


def _provider() -> FastAPI:
    """A minimal OpenID provider: only the discovery document Gradio's login reads."""
    provider = FastAPI()

    @provider.get("/.well-known/openid-configuration")
    def discovery() -> dict[str, str]:
        return {
            "issuer": "http://provider.test",
            "authorization_endpoint": "http://provider.test/oauth/authorize",
            "token_endpoint": "http://provider.test/oauth/token",
            "userinfo_endpoint": "http://provider.test/oauth/userinfo",
            "jwks_uri": "http://provider.test/oauth/jwks",
        }

    return provider


def test_the_complete_space_runtime_gets_the_real_login_never_the_mock(services, monkeypatch):
    import gradio.oauth

    with serve(_provider()) as provider:
        _clear_space(monkeypatch)
        monkeypatch.setenv("HF_TOKEN", "hf_owner_token")
        env = {**SPACE, "OPENID_PROVIDER_URL": provider}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
            if hasattr(gradio.oauth, name):  # gradio.oauth read these at import time
                monkeypatch.setattr(gradio.oauth, name, value)
        assert oauth_available()
        app = build_server(services)
        assert services.admin_enabled  # ADMIN_USERS alone enables the admin panel here
        with serve(app) as base:
            login = httpx.get(f"{base}/login/huggingface", follow_redirects=False, timeout=30)
            # the real flow sends the browser to the provider; the mock would set a signed-in
            # session and send it back to the app
            assert login.status_code in (302, 307), login.text[:300]
            location = login.headers["location"]
            assert location.startswith("http://provider.test/oauth/authorize"), location
            assert "client_id=client-id" in location
            config = httpx.get(f"{base}/config", timeout=30).text
            assert "Sign in with Hugging Face" in config
