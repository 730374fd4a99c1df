"""Launch the workbench: `python app.py` serves on 0.0.0.0:7860 (PORT and HOST override).

The demo corpus and index are prepared in a background thread on first start; the page shows
its progress and the console logs it. Settings come from the environment (DATA_DIR,
DATABASE_URL, ADMIN_PASSWORD, MEDHEB_DEMO_SIZE, ...; see medheb_app/settings.py).
"""

from __future__ import annotations

import os

# Offline and private before gradio is imported: it reads these at import time.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import logging

from medheb_app.services import create_services
from medheb_app.settings import Settings
from medheb_app.ui.shell import build_app, launch_options


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    settings = Settings.from_env()
    services = create_services(settings)
    demo = build_app(services)
    demo.queue(default_concurrency_limit=4).launch(
        server_name=os.environ.get("HOST", "0.0.0.0"),
        server_port=int(os.environ.get("PORT", "7860")),
        show_error=False,
        **launch_options(services),
    )


if __name__ == "__main__":
    main()
