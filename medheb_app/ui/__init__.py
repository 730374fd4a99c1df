"""The Gradio web app: one module per tab, each exposing build_*_tab(services); shell.py and
server.py compose them. Callbacks call the application context and render its answers.

What a ui module may import (tests/test_architecture.py checks it):
- tabs (search_tab, explorer_tab, analysis_tab, admin_tab, rater_app) and their parts
  (admin_study and admin_tokens of the admin tab, search_upload of the search tab): gradio,
  pandas, plotly, `medheb_app.services` (the `Services` object and its facade modules, which
  re-export the value types and errors their answers carry), `medheb_app.public_text`,
  `medheb_app.access` (the web access layer: cookies, rate limits, uploads) and the building
  blocks below; never another tab or another tab's part;
- building blocks (components, evidence_view, drilldown_view, query_reading): pure renderers
  of values, importing no tab;
- named exceptions, each with its reason in the test's UI_MAY_IMPORT: the explorer draws a
  stored run's Summary with eval's table and figure functions, the renderers read the value
  types they draw, the upload intake reads a file into a query Study, the shells mount the
  API.
"""
