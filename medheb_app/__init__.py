"""Clinical evidence retrieval workbench (MedHEB + CXR-Retrieve)."""

import os

# The project runs offline: never phone home, never reach for a model hub.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
