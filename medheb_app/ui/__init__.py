"""The Gradio web app: one module per tab, each exposing build_*_tab(services); shell.py
composes them. Callbacks call service functions and render; no business logic lives here."""
