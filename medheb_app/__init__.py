"""Clinical evidence retrieval workbench (MedHEB + CXR-Retrieve)."""

import os

from medheb_app.gradio_stubs import skip_stub_writer

# The project runs offline: never phone home, never reach for a model hub.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# gradio rewrites its own type stubs on every import (BENCHMARKS.md, "Process start: gradio's
# stub writer"): not this app's work
skip_stub_writer()

__version__ = "0.1.0"
