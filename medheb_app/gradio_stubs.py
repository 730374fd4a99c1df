"""Keep gradio from rewriting its type stubs each time a process imports it.

gradio's ComponentMeta (gradio/component_meta.py) calls `create_or_modify_pyi` for every
component class it defines: it reads and parses the component's source and the `.pyi` beside
it, then writes the stub back when it differs. That is a developer tool for gradio's own
type stubs, nothing reads them at run time, and in a read-only image the write fails and is
ignored anyway; yet it is ~40% of `import gradio` (BENCHMARKS.md, "Process start: gradio's
stub writer"). Every app start, CLI run that serves, and test worker pays it.

`skip_stub_writer()` installs an import hook that replaces the function by a no-op as soon as
gradio.component_meta has run, before any component class is defined, and then leaves the
import system. It touches nothing else: if gradio renames the function or is imported already,
the hook does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

STUB_MODULE = "gradio.component_meta"
STUB_WRITER = "create_or_modify_pyi"


def _no_stub(*_args: object, **_kwargs: object) -> None:
    """Stand-in for gradio's stub writer: type stubs are not this app's business."""


class _StubWriterRemover(importlib.abc.MetaPathFinder):
    """Finds gradio.component_meta as the path finder would, then blanks its stub writer."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != STUB_MODULE:
            return None
        if self in sys.meta_path:  # one module to find: later imports need not ask
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            if callable(getattr(module, STUB_WRITER, None)):
                setattr(module, STUB_WRITER, _no_stub)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def skip_stub_writer() -> None:
    """Install the hook once per process (a no-op when gradio is imported already)."""
    if STUB_MODULE in sys.modules:
        return
    if not any(isinstance(finder, _StubWriterRemover) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StubWriterRemover())
