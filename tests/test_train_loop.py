"""The shared training loop: steps, cap, cancellation and item-weighted epoch losses."""

from __future__ import annotations

import threading

import pytest
import torch

from medheb_app.cancellation import Cancelled
from medheb_app.train.loop import run_steps


def _setup():
    weight = torch.nn.Parameter(torch.tensor(2.0))
    optimiser = torch.optim.SGD([weight], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: 1.0)
    return weight, optimiser, scheduler


def test_epoch_loss_is_item_weighted_and_progress_counts_steps() -> None:
    weight, optimiser, scheduler = _setup()
    seen: list[tuple[int, int]] = []

    def loss_of(n_items: int):
        return weight * 0 + float(n_items), n_items  # loss value = batch size

    result = run_steps(
        [[1, 3], [2]], loss_of, optimiser, scheduler, 3, lambda s, t, v: seen.append((s, t))
    )
    assert result.step == 3
    assert result.epoch_losses == [(1 * 1 + 3 * 3) / 4, 2.0]
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_cap_and_cancel_stop_between_steps() -> None:
    weight, optimiser, scheduler = _setup()
    capped = run_steps([[1, 1], [1, 1]], lambda n: (weight * n, n), optimiser, scheduler, 3)
    assert capped.step == 3 and len(capped.epoch_losses) == 2  # no empty epoch after the cap
    stop = threading.Event()

    def loss_of(n: int):
        stop.set()  # asked to stop during the first step: the second never starts
        return weight * n, n

    with pytest.raises(Cancelled, match="stopped after step 1 of 3; no checkpoint saved"):
        run_steps([[1, 1, 1]], loss_of, optimiser, scheduler, 3, stop=stop)
