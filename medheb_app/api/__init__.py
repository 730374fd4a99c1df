"""The JSON HTTP API (/api/v1): FastAPI routers over the same services as the CLI and the tabs.

`mount_api(app, services)` (api/app.py) adds it to the server's FastAPI app.
"""
