"""Learning-rate schedule of the MedEmb recipe: linear warmup, then cosine decay to a floor.

MedHEB section 4 trains with "AdamW with cosine decay and warmup"; the multiplier below is
applied to the peak learning rate through torch's LambdaLR.
"""

from __future__ import annotations

import math

import torch


def warmup_cosine(step: int, total: int, warmup: int, floor: float = 0.0) -> float:
    """LR multiplier at optimiser step `step` (0-based, the step about to be taken).

    Steps 0 .. warmup-1 ramp linearly from 1/warmup up to 1; from step `warmup` on the
    multiplier follows a half cosine from 1 down to `floor`, which it reaches at step `total`.
    """
    if total < 1 or warmup < 0 or warmup > total or not 0.0 <= floor <= 1.0:
        raise ValueError("need total >= 1, 0 <= warmup <= total and 0 <= floor <= 1")
    if step < warmup:
        return (step + 1) / warmup
    decay_steps = max(total - warmup, 1)
    progress = min((step - warmup) / decay_steps, 1.0)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine_scheduler(
    optimiser: torch.optim.Optimizer, total: int, warmup: int, floor: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR over `warmup_cosine`; call .step() after every optimiser step."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: warmup_cosine(step, total, warmup, floor)
    )
