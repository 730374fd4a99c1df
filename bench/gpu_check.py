"""GPU check: every shipped model embeds the demo corpus on CUDA as it does on the CPU.

For each model: embed N demo chest studies (and their report texts) on the CPU in float32,
on CUDA in float32 and on CUDA in mixed precision (bf16 where supported, else fp16), then
report the cosine between each study's CPU and CUDA vectors (target >= 0.999 in fp32) and
images/s for each. On a machine without a GPU it says so and exits 0.

    python bench/gpu_check.py [--n 256] [--model SPEC ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHIPPED = ("dual-lite", "dual-lite@label-aware", "medemb-lite")
FP32_TARGET = 0.999


def embed(spec: str, device: str, precision: str, studies, settings) -> tuple[object, float]:
    """(vectors, images/s) for `spec` on `device`, a fresh model so nothing is shared."""
    from dataclasses import replace

    import numpy as np

    from medheb_app.models import registry

    registry.clear_cache()
    embedder = registry.load_embedder(spec, replace(settings, precision=precision), device=device)
    embedder.encode(studies[:4])  # warm-up: kernels, autotuning, lazy loads
    for study in studies:
        study.load_pixels()
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    started = time.perf_counter()
    vectors = np.asarray(embedder.encode(studies), np.float32)
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return vectors, len(studies) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="demo studies to embed")
    parser.add_argument("--model", action="append", default=None, help="extra model spec")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    from medheb_app.models.device import cuda_count, inference_dtype

    if cuda_count() == 0:
        print("No CUDA GPU on this machine: nothing to compare (run this on a GPU machine).")
        return 0
    import numpy as np

    from medheb_app.evidence.phantoms import load_corpus
    from medheb_app.evidence.phantoms.saved import demo_corpus
    from medheb_app.settings import Settings

    settings = Settings.from_env()
    studies = load_corpus(demo_corpus(settings, max(args.n, 10)))[: args.n]
    half = str(inference_dtype("cuda")).replace("torch.", "")
    rows = []
    for spec in (*SHIPPED, *(args.model or [])):
        try:
            cpu, cpu_rate = embed(spec, "cpu", "fp32", studies, settings)
            gpu, gpu_rate = embed(spec, "cuda", "fp32", studies, settings)
            mixed, mixed_rate = embed(spec, "cuda", "auto", studies, settings)
        except (FileNotFoundError, KeyError, ValueError) as error:
            print(f"{spec}: skipped ({error})")
            continue
        fp32_cos = np.sum(cpu * gpu, axis=1)
        half_cos = np.sum(cpu * mixed, axis=1)
        rows.append(
            {
                "model": spec,
                "n": len(studies),
                "cos_fp32_min": float(fp32_cos.min()),
                "cos_fp32_mean": float(fp32_cos.mean()),
                f"cos_{half}_min": float(half_cos.min()),
                f"cos_{half}_mean": float(half_cos.mean()),
                "cpu_images_per_s": round(cpu_rate, 1),
                "cuda_fp32_images_per_s": round(gpu_rate, 1),
                f"cuda_{half}_images_per_s": round(mixed_rate, 1),
                "fp32_ok": bool(fp32_cos.min() >= FP32_TARGET),
            }
        )
    import torch

    print(f"GPU: {torch.cuda.get_device_name(0)}; {len(studies)} demo studies; half = {half}")
    print(f"{'model':<24} {'cos fp32 min':>12} {'cos ' + half + ' min':>14} "
          f"{'cpu img/s':>10} {'cuda fp32':>10} {'cuda ' + half:>10}")  # fmt: skip
    for row in rows:
        print(
            f"{row['model']:<24} {row['cos_fp32_min']:>12.6f} {row[f'cos_{half}_min']:>14.6f} "
            f"{row['cpu_images_per_s']:>10} {row['cuda_fp32_images_per_s']:>10} "
            f"{row[f'cuda_{half}_images_per_s']:>10}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    failed = [row["model"] for row in rows if not row["fp32_ok"]]
    if failed:
        print(f"FAIL: fp32 cosine below {FP32_TARGET} for {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
