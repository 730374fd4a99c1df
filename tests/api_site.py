"""A served workbench for the API tests: the demo index (40 phantoms, oracle), a real
(non-synthetic) index of six PNGs ("ward-cxr", random model), two stored benchmark runs (one
with an open reader study, so blinded), tokens of every scope plus a revoked and an expired
one, all behind the real server app (ui.server.build_server) under uvicorn.

Clients set X-Forwarded-For (TRUST_PROXY_HEADERS=1) so each test is its own anonymous client
and the per-client limits of one test do not spill into another.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.web_client import LOCAL_TLS, serve

PASSWORD = "api-admin-pass-3"
_ADDRESSES = itertools.count()
# The demo index's finding probes (DATA_DIR/probes, relative path -> bytes) from this process's
# first build_data. Fitting them is 3.8 of the 4 CPU-seconds a demo build takes, and every site
# builds the same demo index (same corpus, model and labels): the index builder finds the files
# under the name the index's content gives them and loads them instead of fitting them again.
# An index with other content names other files, and fits its own.
_DEMO_PROBES: dict[Path, bytes] = {}


@dataclass
class Site:
    base: str
    services: Any
    settings: Any
    tmp: Path
    tokens: dict[str, str]
    token_ids: dict[str, int]
    runs: dict[str, int] = field(default_factory=dict)

    def client(self, token: str | None = None, address: str | None = None) -> httpx.Client:
        """An HTTP client: its own address, and the bearer token of scope `token`."""
        n = next(_ADDRESSES)
        headers = {"x-forwarded-for": address or f"10.0.{n // 250}.{n % 250 + 1}"}
        if token is not None:
            headers["authorization"] = f"Bearer {self.tokens.get(token, token)}"
        return httpx.Client(
            base_url=f"{self.base}/api/v1", headers=headers, timeout=60, verify=LOCAL_TLS
        )


def text_run(out_dir: Path, settings: Any, tag: str) -> Any:
    from medheb_app.tasks.base import Item
    from tests.run_fixtures import text_bench_run

    pairs = [(Item(f"q{i}", f"w{i} w{i + 1}"), Item(f"t{i}", f"w{i} target")) for i in range(8)]
    return text_bench_run(f"tt-{tag}", pairs, out_dir, settings)


def expire(services: Any, token_id: int) -> None:
    from sqlalchemy import update

    from medheb_app.store.api_tables import ApiToken
    from medheb_app.store.db import utcnow

    with services.store.session() as session:
        session.execute(
            update(ApiToken)
            .where(ApiToken.id == token_id)
            .values(expires_at=utcnow() - timedelta(minutes=1))
        )


def build_data(root: Path, **overrides: Any) -> Any:
    """Settings with the demo index and the real index built under root/data."""
    from medheb_app.demo import ensure_demo
    from medheb_app.index.build import build_from_source
    from medheb_app.settings import Settings

    settings = Settings.from_env(
        data_dir=root / "data", admin_password=PASSWORD, demo_size=40, **overrides
    )
    probes = settings.data_dir / "probes"
    for relative, content in _DEMO_PROBES.items():
        (probes / relative).parent.mkdir(parents=True, exist_ok=True)
        (probes / relative).write_bytes(content)
    ensure_demo(settings, models=["oracle"])
    if not _DEMO_PROBES:
        kept = {path.relative_to(probes): path for path in probes.rglob("*") if path.is_file()}
        _DEMO_PROBES.update({relative: path.read_bytes() for relative, path in kept.items()})
    pngs = root / "ward"
    pngs.mkdir()
    from medheb_app.evidence.phantoms.saved import corpora_root

    for png in sorted(corpora_root(settings).rglob("*.png"))[:6]:
        shutil.copy(png, pngs / png.name)
    build_from_source(f"folder:{pngs}", "random", "ward-cxr", settings)
    return settings


@contextmanager
def running_site(root: Path, monkeypatch_env: dict[str, str], **overrides: Any):
    import os

    from medheb_app.api.tokens import create_token, revoke_token
    from medheb_app.services import create_services
    from medheb_app.study.items import create_study
    from medheb_app.ui.server import build_server

    saved = {key: os.environ.get(key) for key in monkeypatch_env}
    os.environ.update(monkeypatch_env)
    private_tmp = root / "tmp"
    private_tmp.mkdir()
    old_tmp, tempfile.tempdir = tempfile.tempdir, str(private_tmp)
    # the site's open study compares the models its searches use; test_search_blinding.py
    # pins that an open study pauses them, with this site's own setting left on
    overrides.setdefault("study_pauses_search", False)
    try:
        settings = build_data(root, **overrides)
        services = create_services(settings, ensure_demo=lambda s, p: None)
        services.bootstrap.wait(10)
        blinded = text_run(root / "run-blinded", settings, "blinded")
        open_run = text_run(root / "run-open", settings, "open")
        spare = text_run(root / "run-spare", settings, "spare")
        create_study(services.store, "api-study", ["random", "oracle"], blinded.out_dir, n_items=4)
        tokens, ids = {}, {}
        for scope in ("search", "read", "resolve", "admin"):
            tokens[scope], info = create_token(services.store, scope, 1, f"{scope} test")
            ids[scope] = info.id
        tokens["revoked"], info = create_token(services.store, "admin", 1, "revoked")
        revoke_token(services.store, info.id)
        tokens["expired"], info = create_token(services.store, "admin", 1, "expired")
        expire(services, info.id)
        app = build_server(services)
        with serve(app) as base:
            yield Site(
                base=base,
                services=services,
                settings=settings,
                tmp=private_tmp,
                tokens=tokens,
                token_ids=ids,
                runs={"blinded": blinded.run_id, "open": open_run.run_id, "spare": spare.run_id},
            )
        services.jobs.shutdown(wait=False)
    finally:
        tempfile.tempdir = old_tmp
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
