"""Launch the workbench: `python app.py` serves the workbench at / and the raters' page at
/rate on 127.0.0.1:7860 (HOST and PORT override; a container sets HOST=0.0.0.0).

The demo corpus and index are prepared in a background thread on first start; the page shows
its progress and the console logs it. Settings come from the environment (DATA_DIR,
DATABASE_URL, ADMIN_PASSWORD, SESSION_SECRET, QUEUE_MAX_SIZE, CONCURRENCY, MEDHEB_DEMO_SIZE,
...; see medheb_app/settings.py).
"""

from __future__ import annotations

import logging

import uvicorn

from medheb_app.access.auth import StartupRefused, check_oauth_setting
from medheb_app.access.header_cap import HeadCappedProtocol
from medheb_app.access.origin import OriginPolicy
from medheb_app.settings import Settings, listen_address
from medheb_app.startup_heap import startup_phase


def address(environ: dict[str, str] | None = None) -> tuple[str, int]:
    """(host, port): Settings.host / port (HOST, PORT), or those of `environ` when given."""
    if environ is None:
        settings = Settings.from_env()
        return settings.host, settings.port
    return listen_address(environ)


def startup_settings() -> Settings:
    """Settings from the environment, checked before anything is built or written: a refused
    setting is one log line and exit code 2, not a traceback; an accepted but risky one (cookies
    without Secure on an https PUBLIC_ORIGIN) is one warning line."""
    log = logging.getLogger(__name__)
    try:
        settings = Settings.from_env()
        check_oauth_setting(settings.admin_users)
        OriginPolicy(public_origins=settings.public_origins)  # refuses a malformed PUBLIC_ORIGIN
    except (StartupRefused, ValueError) as refused:
        log.error("not starting: %s", refused)
        raise SystemExit(2) from None
    for line in settings.start_warnings:
        log.warning(line)
    return settings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # FAISS probes its CPU builds at import and logs each one this machine lacks, with a
    # ModuleNotFoundError, at INFO: four lines per start that read like a failure
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    settings = startup_settings()
    with startup_phase():  # what is loaded here lives as long as the process
        # deferred past the checks: the models, Gradio and the UI are 2-3 s of imports that a
        # refused start (one line, exit 2) does not need
        from medheb_app.services import create_services
        from medheb_app.ui.server import build_server

        services = create_services(settings)
        server = build_server(services)
    host, port = address()
    logging.getLogger(__name__).info("serving on http://%s:%d (raters: /rate)", host, port)
    uvicorn.run(
        server,
        host=host,
        port=port,
        log_level="warning",
        proxy_headers=False,
        http=HeadCappedProtocol,  # httptools with a 64 KB cap on a request's headers
    )


if __name__ == "__main__":
    main()
