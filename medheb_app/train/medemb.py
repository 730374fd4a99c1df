"""The MedEmb recipe (MedHEB section 4, Appendix A.1) for medemb-lite and mllm: models.

Instruction-prefixed query-target pairs from the MedHEB-lite ID training split (every ID
task's train part; held-out sources never appear) train one backbone for every input form:

  * InfoNCE at tau = 0.01 with false-negative masking, margin delta = 0.1 on the cosine
    (train/losses.py: masked_infonce_loss; why the cosine is argued there). In-batch pairs
    whose targets are the same item (two queries answered "no") are not negatives either.
  * token-budgeted dynamic batching: 2 |B| max l* <= T = 2 B_nom L_max, |B| <= S_max, online
    greedy best-fit packing (train/batching.py); "static" gives fixed B_nom batches instead.
  * LoRA r = 8, alpha = 32 on the backbone (BERT query/key/value/dense for medemb-lite,
    attention projections for Qwen-VL), AdamW, linear warmup then cosine decay.

MedEmb starts from a pretrained MLLM whose vision projector is already aligned to its
language model. medemb-lite's projection starts random, so for medemb-lite two steps come
first (both part of the default run, both recorded in the checkpoint's config.json):

  * the frozen visual features are standardised per channel with the training images'
    statistics (models/medemb_projection.py; a checkpoint trained without this and
    without stage 1 embedded test images at a mean pairwise cosine of 0.98);
  * stage 1 (train/medemb_align.py, --align-steps): the projection alone is trained on
    every ID-train image -> report pair with the backbone frozen, LLaVA-style.

The paper trains one epoch over the whole split (7,097 pairs here) at peak LR 1e-4 on 8
H100s. A step of 16 pairs costs ~3-5 s of one CPU core, so here pairs are capped at 300 per
task (2,183 pairs, 131 steps) and the default LR is higher; both are flags. The result
is a checkpoint folder that loads as "medemb-lite@<folder>" (or "mllm:<folder>" for an
mllm base, whose LoRA adapter names its base).
"""

from __future__ import annotations

import hashlib
import json
import resource
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from medheb_app.evidence.study import Evidence, as_evidence
from medheb_app.models.base import ModelCard
from medheb_app.models.device import resolve_device
from medheb_app.models.medemb_lite import MedEmbLiteConfig, MedEmbLiteEmbedder
from medheb_app.models.mllm import MLLMConfig, load, mllm_card
from medheb_app.settings import Settings
from medheb_app.tasks.medheb import training_pairs
from medheb_app.train.batching import TokenBudgetBatcher, padded_cost, static_batches, token_budget
from medheb_app.train.config import config_to_dict
from medheb_app.train.contrastive import Progress, TrainResult
from medheb_app.train.loop import check_stop, report_stage, run_steps
from medheb_app.train.losses import (
    MEDEMB_MARGIN,
    MEDEMB_TEMPERATURE,
    false_negative_mask,
    masked_infonce_loss,
)
from medheb_app.train.medemb_align import ALIGN_TASKS, align_projection, caption_bank
from medheb_app.train.schedule import warmup_cosine_scheduler

MEDEMB_FILE = "medemb.json"  # run record written beside an mllm adapter


@dataclass
class MedEmbConfig:
    """Settings of one MedEmb run; each field is a `train medemb` flag."""

    model: str = field(
        default="medemb-lite", metadata={"help": "backbone: medemb-lite or mllm:/path/to/model"}
    )
    pairs_per_task: int = field(
        default=300, metadata={"help": "training pairs drawn per ID task (0 = all)"}
    )
    epochs: int = field(default=1, metadata={"help": "passes over the pairs (paper: 1)"})
    max_steps: int = field(default=0, metadata={"help": "stop after this many steps (0 = no cap)"})
    lr: float = field(default=5e-4, metadata={"help": "AdamW peak learning rate (paper: 1e-4)"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})
    warmup_ratio: float = field(default=0.1, metadata={"help": "share of steps in warmup"})
    temperature: float = field(default=MEDEMB_TEMPERATURE, metadata={"help": "InfoNCE tau"})
    margin: float = field(
        default=MEDEMB_MARGIN, metadata={"help": "false-negative margin delta on the cosine"}
    )
    mask: bool = field(default=True, metadata={"help": "false-negative masking (eq. 2-3)"})
    batching: Literal["dynamic", "static"] = field(
        default="dynamic", metadata={"help": "token-budgeted best-fit or fixed-size batches"}
    )
    fit: Literal["budget", "padding"] = field(
        default="budget",
        metadata={"help": "best fit by budget left, or by added padding (groups lengths)"},
    )
    nominal_batch: int = field(default=16, metadata={"help": "B_nom (the static batch size)"})
    max_len: int = field(
        default=0, metadata={"help": "L_max for T = 2 B_nom L_max (0 = longest pair in the data)"}
    )
    max_batch: int = field(default=64, metadata={"help": "S_max, the most pairs in a batch"})
    lora_rank: int = field(default=8, metadata={"help": "LoRA r"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha"})
    pooling: Literal["last", "mean"] = field(
        default="last", metadata={"help": "medemb-lite: final-token or mean pooling"}
    )
    max_text_tokens: int = field(
        default=64, metadata={"help": "medemb-lite: word tokens kept per text (CPU budget)"}
    )
    standardise: bool = field(
        default=True,
        metadata={"help": "medemb-lite: standardise frozen visual features per channel"},
    )
    align_steps: int = field(
        default=400,
        metadata={
            "help": "medemb-lite: stage-1 steps aligning the visual projection on ID-train "
            "image -> report pairs, backbone frozen, before the recipe (mllm: models are "
            "aligned already; 0 = none)"
        },
    )
    align_lr: float = field(default=1e-3, metadata={"help": "stage-1 AdamW learning rate"})
    align_batch: int = field(default=32, metadata={"help": "stage-1 images per step"})
    seed: int = field(default=0, metadata={"help": "seed for sampling, shuffling and init"})

    def __post_init__(self) -> None:
        if self.model != "medemb-lite" and not self.model.startswith("mllm:"):
            raise ValueError(f"model must be medemb-lite or mllm:/path; got {self.model!r}")
        for name in (
            "epochs",
            "nominal_batch",
            "max_batch",
            "lora_rank",
            "lora_alpha",
            "max_text_tokens",
            "align_batch",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        if min(self.pairs_per_task, self.max_steps, self.max_len, self.align_steps) < 0:
            raise ValueError("pairs_per_task, max_steps, max_len and align_steps must be >= 0")
        if self.model.startswith("mllm:"):
            self.align_steps = 0  # an MLLM's vision projector comes aligned by pretraining
        if self.lr <= 0 or self.align_lr <= 0 or self.temperature <= 0 or self.margin < 0:
            raise ValueError("lr, align_lr and temperature must be > 0 and margin >= 0")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError("warmup_ratio must be in [0, 1)")
        if self.batching not in ("dynamic", "static") or self.pooling not in ("last", "mean"):
            raise ValueError("batching is dynamic|static and pooling last|mean")
        if self.fit not in ("padding", "budget"):
            raise ValueError(f"fit must be padding or budget; got {self.fit!r}")


@dataclass(frozen=True)
class Pair:
    """One instruction-prefixed query and its target (what the trainer sees)."""

    instruction: str
    query: Evidence
    target: Evidence
    task: str


def evidence_key(evidence: Evidence) -> str:
    """Identity of an input's content, so that repeated targets can be recognised."""
    digest = hashlib.sha1((evidence.text or "").encode())
    for array in (evidence.image, evidence.volume):
        if array is not None:
            digest.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return digest.hexdigest()


def sample_pairs(raw: Sequence[tuple], per_task: int, seed: int) -> list[Pair]:
    """Up to `per_task` pairs from each task (seeded), from training_pairs() tuples."""
    by_task: dict[str, list[tuple]] = defaultdict(list)
    for row in raw:
        by_task[row[3]].append(row)
    rng = np.random.default_rng(seed)
    chosen: list[Pair] = []
    for task in sorted(by_task):
        rows = by_task[task]
        if per_task and len(rows) > per_task:
            rows = [rows[i] for i in sorted(rng.choice(len(rows), per_task, replace=False))]
        chosen += [Pair(inst, as_evidence(q), as_evidence(t), name) for inst, q, t, name in rows]
    return chosen


def same_target_matrix(keys: Sequence[str]) -> torch.Tensor:
    """B x B: True where two pairs of the batch share their target item (j != i)."""
    codes = torch.tensor([hash(k) for k in keys])
    same = codes[:, None] == codes[None, :]
    return same & ~torch.eye(len(keys), dtype=torch.bool)


def plan_batches(lengths: Sequence[int], config: MedEmbConfig, rng: np.random.Generator):
    """Each epoch's batches (lists of pair rows) and the budget T they were packed under."""
    max_len = config.max_len or max(lengths)
    budget = token_budget(config.nominal_batch, max_len)
    batcher = TokenBudgetBatcher(budget, config.max_batch, fit=config.fit)
    epochs = []
    for _ in range(config.epochs):
        order = rng.permutation(len(lengths))
        if config.batching == "dynamic":
            batches = list(batcher.batches(lengths, order))
        else:
            batches = static_batches(len(lengths), config.nominal_batch, order)
        epochs.append([b for b in batches if len(b) >= 2])  # one pair has no negatives
    return epochs, budget


def build_model(config: MedEmbConfig, device: str = "cpu"):
    """The backbone to train, with fresh LoRA adapters (and medemb-lite's projection), on
    `device` (a resolved torch device; float32 weights, so LoRA trains in full precision)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(config.seed)
    if config.model == "medemb-lite":
        lite = MedEmbLiteConfig(pooling=config.pooling, max_text_tokens=config.max_text_tokens)
        model = MedEmbLiteEmbedder.untrained(lite, config.seed)
        trainable = list(model.projection.parameters())
    else:
        model = load(config.model)
        trainable = []
    model.backbone.requires_grad_(False)
    lora = LoraConfig(
        r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=model.lora_targets
    )
    model.backbone = get_peft_model(model.backbone, lora)
    trainable += [p for p in model.backbone.parameters() if p.requires_grad]
    if config.model == "medemb-lite":
        model.to_device(device)
    else:
        model.backbone = model.backbone.to(device)
    return model, trainable


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train_medemb(
    config: MedEmbConfig,
    out: Path | str,
    settings: Settings,
    pairs: Sequence[Pair] | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> TrainResult:
    """Run the recipe and save the checkpoint to `out`; pairs default to MedHEB-lite's."""
    started = time.perf_counter()
    captioned = pairs
    if pairs is None:
        report_stage(progress, "building the MedHEB-lite training pairs")
        raw = training_pairs(settings)
        pairs = sample_pairs(raw, config.pairs_per_task, config.seed)
        # stage 1 reads every ID-train image -> report pair, whatever the stage-2 sample
        captioned = pairs
        if config.pairs_per_task and config.align_steps:
            captioned = sample_pairs([r for r in raw if r[3] in ALIGN_TASKS], 0, config.seed)
    if len(pairs) < 2:
        raise ValueError("The MedEmb recipe needs at least 2 training pairs.")
    bank = caption_bank(captioned) if config.align_steps else None
    if bank is not None and len(bank.images) < 2:
        raise ValueError(
            f"Stage-1 alignment needs image -> report pairs (tasks {', '.join(ALIGN_TASKS)}) "
            "among the training pairs; none were found. Use --align-steps 0."
        )

    check_stop(stop, "building the training pairs")
    report_stage(progress, f"loading the model for {len(pairs)} training pairs")
    model, trainable = build_model(config, resolve_device(settings.device))
    check_stop(stop, "loading the model")
    if hasattr(model, "precompute_visual"):  # frozen tower: every image once, batched
        report_stage(progress, "caching the frozen visual features")
        items = [p.query for p in pairs] + [p.target for p in pairs]
        stored = settings.cache_dir / "medemb-lite-visual.pt"
        model.features.load(stored)
        if model.precompute_visual(items):
            model.features.save(stored)
        visual_tokens = model.fit_visual_statistics(items) if config.standardise else None
    else:
        visual_tokens = None
    check_stop(stop, "caching visual features")
    aligned = None
    if bank is not None:
        aligned = align_projection(
            model,
            bank,
            config.align_steps,
            config.align_lr,
            config.align_batch,
            config.temperature,
            config.seed,
            progress,
            stop,
        )
    lengths = [
        max(model.sequence_length(p.query, p.instruction), model.sequence_length(p.target, None))
        for p in pairs
    ]
    keys = [evidence_key(p.target) for p in pairs]
    rng = np.random.default_rng(config.seed)
    epochs, budget = plan_batches(lengths, config, rng)
    total = sum(len(batches) for batches in epochs)
    if config.max_steps:
        total = min(total, config.max_steps)
    if total == 0:
        raise ValueError("No batch holds two pairs; lower nominal_batch or add pairs.")
    optimiser = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = warmup_cosine_scheduler(optimiser, total, round(config.warmup_ratio * total))
    margin = config.margin if config.mask else None

    masked = {"margin": 0, "same_target": 0, "negatives": 0}
    tally = {"padded": 0, "seen": 0}

    def loss_of(rows):
        batch = [pairs[i] for i in rows]
        queries = model.embed([p.query for p in batch], [p.instruction for p in batch])
        targets = model.embed([p.target for p in batch], [None] * len(batch))
        same = same_target_matrix([keys[i] for i in rows]).to(queries.device)
        loss = masked_infonce_loss(queries, targets, config.temperature, margin, same)
        _count_masked(masked, queries.detach() @ targets.detach().T, config.margin, same)
        tally["padded"] += padded_cost([lengths[i] for i in rows])
        tally["seen"] += len(rows)
        return loss, len(rows)

    model.backbone.train()  # only the backbone: the frozen image tower keeps eval-mode BN
    try:
        looped = run_steps(epochs, loss_of, optimiser, scheduler, total, progress, stop)
    finally:
        model.backbone.eval()
    step, epoch_losses = looped.step, looped.epoch_losses
    padded, seen = tally["padded"], tally["seen"]
    seconds = time.perf_counter() - started
    folder = Path(out)

    info = {
        "tag": folder.name,
        "recipe": "medemb",
        "description": f"MedEmb recipe on {len(pairs)} MedHEB-lite ID training pairs",
        "data": {
            "n_pairs": len(pairs),
            "tasks": dict(sorted(_count(p.task for p in pairs).items())),
            "fingerprint": hashlib.sha256("".join(sorted(keys)).encode()).hexdigest()[:16],
        },
        "training": config_to_dict(config),
        "results": {
            "steps": step,
            "epoch_losses": [round(x, 6) for x in epoch_losses],
            "final_loss": round(epoch_losses[-1], 6) if epoch_losses else None,
            "seconds": round(seconds, 1),
            "peak_memory_mb": round(peak_memory_mb(), 1),
            "token_budget": budget,
            "padded_tokens": padded,
            "mean_batch_pairs": round(seen / max(step, 1), 2),
            "visual_tokens_standardised": visual_tokens,
            "alignment": aligned,
            # shares of in-batch negatives that eq. 2's margin rule (whether or not it was
            # applied) and the same-target rule drop: how much masking can matter
            "masked_share_margin": round(masked["margin"] / max(masked["negatives"], 1), 4),
            "masked_share_same_target": round(
                masked["same_target"] / max(masked["negatives"], 1), 4
            ),
        },
    }
    card = save(model, folder, info)
    return TrainResult(folder, card, step, epoch_losses, None, seconds)


def _count_masked(
    counts: dict[str, int], cosine: torch.Tensor, margin: float, same: torch.Tensor
) -> None:
    """Add a batch's off-diagonal pairs and how many of them each masking rule drops."""
    off_diagonal = ~torch.eye(len(cosine), dtype=torch.bool)
    by_margin = ~false_negative_mask(cosine, margin) & off_diagonal
    counts["negatives"] += int(off_diagonal.sum())
    counts["margin"] += int(by_margin.sum())
    counts["same_target"] += int((same & ~by_margin).sum())


def save(model, folder: Path, info: dict) -> ModelCard:
    """medemb-lite: its own checkpoint format; mllm: the peft adapter plus a run record."""
    if hasattr(model, "save_checkpoint"):
        return model.save_checkpoint(folder, info)

    folder.mkdir(parents=True, exist_ok=True)
    model.backbone.save_pretrained(str(folder))
    (folder / MEDEMB_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
    base = Path(model.card.base)
    return mllm_card(folder, base, model.backbone, MLLMConfig())


def _count(values) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for value in values:
        counts[value] += 1
    return dict(counts)


def spec_for_card(card: dict) -> str:
    """The spec a trained checkpoint loads with (a card as a dict, as the CLI reports it)."""
    if str(card["name"]).startswith("mllm:"):
        return f"mllm:{card['weights']}"
    return f"{card['name']}@{card['weights']}"
