"""The composed app: tabs present or absent by settings, and the raters' page served blind."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from medheb_app.services import create_services
from medheb_app.settings import Settings
from medheb_app.ui.shell import build_app, launch_options


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(port: int, page: str = "") -> str:
    suffix = f"?page={page}" if page else ""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/config{suffix}", timeout=30) as reply:
        return reply.read().decode()


@pytest.fixture
def launched(tmp_path, monkeypatch, request):
    """The real app on a free port; the parameter is the admin password ('' = public demo)."""
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    settings = Settings.from_env(admin_password=request.param)
    services = create_services(settings, start_bootstrap=False)
    demo = build_app(services)
    port = _free_port()
    demo.launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        **launch_options(services),
    )
    yield port
    demo.close()
    services.jobs.shutdown(wait=False)


def _labels(config: str) -> set[str]:
    components = json.loads(config)["components"]
    return {str(c.get("props", {}).get("label")) for c in components}


@pytest.mark.parametrize("launched", [""], indirect=True)
def test_public_demo_has_no_admin_and_a_blind_rater_page(launched):
    main = _config(launched)
    labels = _labels(main)
    assert {"Query", "Run", "Study", "Model", "Index"} <= labels
    assert "Admin password" not in labels and "Admin" not in labels
    rater = _config(launched, "rate")
    assert "Your name or rater token" in _labels(rater)
    assert "Query" not in _labels(rater) and "Admin password" not in _labels(rater)
    for name in ("dual-lite", "oracle", "random"):  # pickers are filled on load, not baked in
        assert f'"{name}"' not in main and name not in rater


@pytest.mark.parametrize("launched", ["s3cret-pass"], indirect=True)
def test_admin_tab_exists_only_with_a_password_and_never_leaks_it(launched):
    main = _config(launched)
    assert {"Admin", "Admin password"} <= _labels(main)
    assert "s3cret-pass" not in main
