"""What gradio's stub writer costs each process that imports it (medheb_app/gradio_stubs.py).

    .venv/bin/python bench/bench_process_start.py [--rounds 7] [--write]

Each round starts fresh Pythons, alternating the two ways, and reads each one's own CPU
seconds (time.process_time) over its imports:
- `import gradio`: with medheb_app's hook installed first, and with gradio imported before
  medheb_app, so gradio's create_or_modify_pyi runs for every component class as it ships;
- the app's imports (`medheb_app.ui.server` and `medheb_app.services`, what app.py loads
  before it serves), the same two ways.
Reports medians and the ratio hooked / unhooked. `--write` puts the table into BENCHMARKS.md
between bench_process_start markers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_api import write_section  # noqa: E402
from bench.fresh_starts import fresh_python, section_heading  # noqa: E402

MARKERS = ("<!-- bench_process_start:start -->", "<!-- bench_process_start:end -->")
IMPORTS = {
    "import gradio": "gradio",
    "app.py's imports": "medheb_app.ui.server, medheb_app.services",
}
CHILD = """
import time, importlib, sys
first, modules = sys.argv[1], sys.argv[2].split(", ")
if first == "medheb_app":
    started = time.process_time()
    import medheb_app
else:  # gradio first: medheb_app's hook finds gradio loaded and stays out of the way
    started = time.process_time()
    import gradio
    import medheb_app
for name in modules:
    importlib.import_module(name)
import gradio.component_meta as meta
print(time.process_time() - started, meta.create_or_modify_pyi.__name__)
"""


def one_start(first: str, modules: str) -> tuple[float, str]:
    """CPU seconds of one fresh Python's imports, and which stub writer gradio ended with."""
    seconds, writer = fresh_python(CHILD, first, modules, env={"PYTHONDONTWRITEBYTECODE": "1"})
    return float(seconds), writer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    one_start("medheb_app", "gradio")  # warm the page cache for both ways alike
    rows = []
    for label, modules in IMPORTS.items():
        hooked, unhooked = [], []
        for _ in range(args.rounds):
            seconds, writer = one_start("medheb_app", modules)
            assert writer == "_no_stub", writer
            hooked.append(seconds)
            seconds, writer = one_start("gradio", modules)
            assert writer == "create_or_modify_pyi", writer
            unhooked.append(seconds)
        a, b = statistics.median(hooked), statistics.median(unhooked)
        rows.append((label, b, a, b - a, a / b))
        print(f"{label}: stub writer on {b:.2f} s, off {a:.2f} s, saved {b - a:.2f} s", end="")
        print(f" (off / on {a / b:.2f})")
    lines = [
        MARKERS[0],
        *section_heading("bench_process_start.py", args.rounds),
        "",
        "| imports in a fresh Python | stub writer on (CPU s) | off (CPU s) | saved | off / on |",
        "|---|---:|---:|---:|---:|",
        *(f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} |" for r in rows),
        "",
        f"Medians of {args.rounds} starts each way, alternating; no bytecode written.",
        MARKERS[1],
    ]
    if args.write:
        write_section("\n".join(lines), MARKERS)


if __name__ == "__main__":
    main()
