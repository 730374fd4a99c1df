"""The recorded colour slot of every model (medheb_app.eval.colours explains the palette).

A slot is given once and never changes: the shipped models hold the first slots, then each
model takes the next one the first time it is looked up, models of stored runs first in the
order the runs were started (so an older database gets the order its runs had).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Integer, String, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from medheb_app.eval.colours import SHIPPED_MODELS, is_bound
from medheb_app.store.db import Base, Store
from medheb_app.store.runs import Run


class ModelColour(Base):
    """model name -> its slot in eval.colours.PALETTE."""

    __tablename__ = "model_colours"

    model: Mapped[str] = mapped_column(String(500), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, unique=True)


def model_slots(store: Store, names: Iterable[str]) -> dict[str, int]:
    """The slot of every model recorded so far, after recording `names` (and every model of
    a stored run) that had none. Safe to call from two processes at once: a clash on a slot
    is retried once with the other's rows read back."""
    wanted = [n for n in dict.fromkeys(names) if not is_bound(n)]
    for attempt in range(2):
        try:
            return _record(store, wanted)
        except IntegrityError:
            if attempt:
                raise
    raise AssertionError("unreachable")


def _record(store: Store, wanted: list[str]) -> dict[str, int]:
    with store.session() as session:
        slots = {row.model: row.slot for row in session.scalars(select(ModelColour))}
        if all(name in slots for name in wanted) and slots:
            return slots
        order = list(SHIPPED_MODELS)
        for models in session.scalars(select(Run.models).order_by(Run.id)):
            order += list(models or [])
        order += wanted
        next_slot = max(slots.values(), default=-1) + 1
        for name in dict.fromkeys(order):
            if name in slots or is_bound(name):
                continue
            session.add(ModelColour(model=name, slot=next_slot))
            slots[name] = next_slot
            next_slot += 1
        return slots
