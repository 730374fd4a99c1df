"""Where the logic-aware ranker's ceiling is: the probe, the views, or the image tower?

    .venv/bin/python bench/logic_ceiling.py                       # dual-lite, views, val + test
    .venv/bin/python bench/logic_ceiling.py --cnn-epochs 8        # + a pixel CNN for Fracture

Part 1 runs the real CXR-Retrieve evaluation (eval/cxr_retrieve.evaluate) with the
logic-aware ranker over one model, varying only what its probes read (ranking/views.py
VIEW_SETS): the whole-image embedding, + the 2x2 zoomed crops, + also a 3x3 grid of closer
crops (the default since it won on val). Per
variant it prints negation P@5 and HNRR@5, and per finding the probe's test ROC AUC and the
negation P@5 of the queries that require that finding.

Part 2 (--cnn-epochs N > 0) asks whether a finding the probes cannot see is in the pixels at
all: a small CNN trained from scratch on the native-resolution train images (max-pooled
per-location logits, horizontal flips, class-balanced BCE), scored by test ROC AUC and P@5.
It is a diagnostic, not a ranker: the logic-aware ranker only reads an embedding model.
Results are printed as markdown; docs/cxr-retrieve.md quotes them with this command.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from medheb_app.eval.cxr_tables import p5_by_finding  # noqa: E402
from medheb_app.eval.metrics import precision_at_k  # noqa: E402
from medheb_app.evidence.findings import CXR_RETRIEVE_10  # noqa: E402
from medheb_app.evidence.study import Study  # noqa: E402
from medheb_app.ranking.logic_aware import LogicAwareRanker, probe_features  # noqa: E402
from medheb_app.ranking.probes import ProbeConfig, fit_probe  # noqa: E402
from medheb_app.ranking.views import VIEW_SETS  # noqa: E402


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    if labels.all() or not labels.any():
        return float("nan")
    return float(roc_auc_score(labels, scores))


def views_part(args, settings, cache, studies: dict[str, list[Study]]) -> None:
    from medheb_app.eval.cxr_retrieve import evaluate
    from medheb_app.models.registry import load_embedder
    from medheb_app.tasks.cxr_retrieve import gallery_from_studies

    embedder = load_embedder(args.model, settings)
    train = studies["train"]
    labels = [s.findings for s in train]
    print(f"## Probe views, logic-aware ranker over {args.model}\n")
    print("| views | split | single P@5 | pair P@5 | negation P@5 | HNRR@5 | probe fit s |")
    print("|---|---|---|---|---|---|---|")
    details = []
    for views in args.views:
        started = time.perf_counter()
        features = probe_features(embedder, train, views, cache)
        config = ProbeConfig(views=views)
        probe = fit_probe(features, labels, CXR_RETRIEVE_10, embedder.card.fingerprint, config)
        fit_s = time.perf_counter() - started
        ranker = LogicAwareRanker(embedder, probe, cache, name=f"logic:{args.model}[{views}]")
        for split in args.splits:
            gallery = gallery_from_studies(studies["all"], args.data, split)
            report = evaluate(ranker, gallery)
            regimes = report.regimes
            print(
                f"| {views} | {split} | {regimes['single']['P@5']:.1f} | "
                f"{regimes['pair']['P@5']:.1f} | {regimes['negation']['P@5']:.1f} | "
                f"{regimes['negation']['HNRR@5']:.1f} | {fit_s:.0f} |",
                flush=True,
            )
            if split == args.splits[-1]:
                logits = probe.logits(probe_features(embedder, gallery.studies, views, cache))
                truth = np.array(
                    [[s.findings.get(f) == 1 for f in CXR_RETRIEVE_10] for s in gallery.studies]
                )
                aucs = {
                    f: roc_auc(truth[:, j], logits[:, j]) for j, f in enumerate(CXR_RETRIEVE_10)
                }
                details.append((views, split, aucs, p5_by_finding(report, "negation")))
    for views, split, aucs, by_finding in details:
        print(
            f"\nPer finding, views {views}, {split} split: probe ROC AUC / negation P@5 of "
            "'A and no B' queries requiring it\n"
        )
        print("| " + " | ".join(CXR_RETRIEVE_10) + " |")
        print("|" + "---|" * len(CXR_RETRIEVE_10))
        print(
            "| "
            + " | ".join(
                f"{aucs[f]:.2f} / {by_finding.get(f, float('nan')):.0f}" for f in CXR_RETRIEVE_10
            )
            + " |"
        )


def pixel_cnn_part(args, studies: dict[str, list[Study]]) -> None:
    """Train a small CNN from scratch on native-resolution pixels for one finding."""
    import torch
    from torch import nn

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    def tensors(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        pixels = np.stack([np.asarray(s.load_pixels(), np.float32) for s in studies[split]])
        labels = [float(s.findings.get(args.finding) == 1) for s in studies[split]]
        return torch.from_numpy(pixels)[:, None], torch.tensor(labels)

    x_train, y_train = tensors("train")
    x_test, y_test = tensors("test")

    def block(c_in: int, c_out: int, stride: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1), nn.BatchNorm2d(c_out), nn.ReLU())

    net = nn.Sequential(
        block(1, 16, 1),
        block(16, 32, 2),
        block(32, 32, 1),
        block(32, 64, 2),
        block(64, 64, 1),
        block(64, 64, 2),
        nn.Conv2d(64, 1, 1),
    )
    score: Callable[[torch.Tensor], torch.Tensor] = lambda x: net(x).amax((1, 2, 3))  # noqa: E731
    positives = y_train.sum()
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=(len(y_train) - positives) / positives)
    optimiser = torch.optim.AdamW(net.parameters(), 2e-3, weight_decay=1e-4)
    print(
        f"\n## Pixel CNN for {args.finding} (from scratch, {tuple(x_train.shape[2:])} px, "
        f"{int(positives)} train positives, {int(y_test.sum())} test positives)\n"
    )
    print("| epoch | wall s | test ROC AUC | test P@5 | test P@10 |")
    print("|---|---|---|---|---|")
    started = time.perf_counter()
    for epoch in range(1, args.cnn_epochs + 1):
        net.train()
        for batch in np.array_split(rng.permutation(len(y_train)), max(1, len(y_train) // 32)):
            index = torch.from_numpy(batch)
            images = x_train[index].flip(-1) if rng.random() < 0.5 else x_train[index]
            loss = loss_fn(score(images), y_train[index])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        net.eval()
        with torch.no_grad():
            scores = torch.cat([score(x_test[i : i + 64]) for i in range(0, len(x_test), 64)])
        ranked = torch.argsort(scores, descending=True).tolist()
        positive = set(torch.nonzero(y_test).flatten().tolist())
        print(
            f"| {epoch} | {time.perf_counter() - started:.0f} | "
            f"{roc_auc(y_test.numpy() > 0, scores.numpy()):.3f} | "
            f"{100 * precision_at_k(ranked, positive, 5):.0f} | "
            f"{100 * precision_at_k(ranked, positive, 10):.0f} |",
            flush=True,
        )


def main() -> None:
    from medheb_app.index.cache import EmbeddingCache
    from medheb_app.settings import Settings
    from medheb_app.tasks.cxr_retrieve import load_studies, select_split

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="dual-lite")
    parser.add_argument("--data", default="phantom")
    parser.add_argument(
        "--views",
        nargs="+",
        default=list(VIEW_SETS),
        choices=list(VIEW_SETS),
    )
    parser.add_argument("--splits", nargs="+", default=["val", "test"])
    parser.add_argument("--skip-views", action="store_true", help="only the pixel CNN part")
    parser.add_argument("--cnn-epochs", type=int, default=0)
    parser.add_argument("--finding", default="Fracture")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    settings = Settings.from_env()
    every = [s for s in load_studies(args.data, settings) if s.form == "2d"]
    studies = {
        "all": every,
        **{name: select_split(every, name) for name in {"train", "test", *args.splits}},
    }
    if not args.skip_views:
        views_part(args, settings, EmbeddingCache(settings.cache_dir), studies)
    if args.cnn_epochs > 0:
        pixel_cnn_part(args, studies)


if __name__ == "__main__":
    main()
