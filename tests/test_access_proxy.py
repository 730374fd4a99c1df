"""Proxy trust by count, attacked over HTTP (issue 19 item 4).

With TRUST_PROXY_HEADERS=1 the limiter used to key on the *first* X-Forwarded-For entry, which
the client writes: 30 wrong admin passwords then the right one got in, and neither invitation
codes nor searches were ever limited. Here the test client plays the attacker behind one (or
two) proxies: every request carries a fresh forged left-most entry, followed by what the
proxies append (the same real address each time).
"""

from __future__ import annotations

import pytest

from medheb_app.services import create_services
from medheb_app.settings import Settings
from medheb_app.ui.server import build_server
from tests.web_client import QueueClient, fn_index, serve

PASSWORD = "proxy-admin-pass-3"


@pytest.fixture(scope="module", params=[1, 2], ids=["one-proxy", "two-proxies"])
def site(request, tmp_path_factory):
    """The app behind `hops` trusted proxies, shared by the module's tests: each test attacks
    from a real client address of its own, and every limit is kept per client address."""
    hops = request.param
    settings = Settings.from_env(
        data_dir=tmp_path_factory.mktemp("proxy") / "data",
        admin_password=PASSWORD,
        trusted_proxy_hops=hops,
    )
    services = create_services(settings, start_bootstrap=False)
    app = build_server(services)
    with serve(app) as base:
        yield base, app, hops
    services.jobs.shutdown(wait=False)


def _via_proxies(i: int, hops: int, client: str) -> dict[str, str]:
    """Headers as they reach the app: the attacker's forged entries, then the client address
    the outermost proxy saw, then one entry per inner proxy."""
    chain = [f"198.51.100.{i % 250}", f"192.0.2.{i % 250}", client, *["10.0.0.2"] * (hops - 1)]
    return {"x-forwarded-for": ", ".join(chain)}


def test_forged_forwarded_for_does_not_escape_the_password_lockout(site):
    base, _, hops = site
    client = QueueClient(base)
    statuses = []
    for i in range(30):
        client.http.headers.update(_via_proxies(i, hops, "203.0.113.50"))
        statuses.append(client.post_form("/auth/admin", {"password": f"wrong-{i}"}).status_code)
    assert statuses.count(401) <= 5 and statuses.count(429) >= 25, statuses
    client.http.headers.update(_via_proxies(99, hops, "203.0.113.50"))
    assert client.post_form("/auth/admin", {"password": PASSWORD}).status_code == 429
    # another real client behind the same proxies is not locked out by the attacker
    other = QueueClient(base)
    other.http.headers.update(_via_proxies(0, hops, client="203.0.113.77"))
    assert other.post_form("/auth/admin", {"password": PASSWORD}).status_code == 303


def test_forged_forwarded_for_does_not_escape_the_invitation_code_limit(site):
    base, _, hops = site
    client = QueueClient(base)
    statuses = []
    for i in range(30):
        client.http.headers.update(_via_proxies(i, hops, "203.0.113.60"))
        statuses.append(client.post_form("/auth/rater", {"code": f"guess-{i}"}).status_code)
    assert statuses.count(429) >= 19, statuses


def test_forged_forwarded_for_does_not_escape_the_search_limit(site):
    base, app, hops = site
    search = fn_index(app.state.blocks["main"], "build_search_tab.<locals>._search")
    limited = 0
    for i in range(45):
        client = QueueClient(base)  # a fresh session and cookie jar each time, too
        client.http.headers.update(_via_proxies(i, hops, "203.0.113.70"))
        text = str(
            client.call(search, ["effusion", None, None, None, 5, "auto", False, "volume", 0])
        )
        limited += "Too many searches" in text
        client.close()
    assert limited >= 15, limited
