"""One colour per model, the same in every chart, never shared by two models of one run.

Colours come from a fixed, colour-blind-safe list: the seven Okabe-Ito colours (Okabe & Ito,
"Color Universal Design", 2008; black left out, it is the oracle's) followed by the nine of
Paul Tol's "muted" scheme (Tol, "Colour schemes", SRON/EPS/TN/09-002). A model's colour is its
*slot* in that list: the shipped models hold the first slots, every other model gets the next
free slot when it first appears in the store, and `store.colours` records it, so a model
keeps its colour as runs come and go. Two models of one run never share a colour: when their
slots wrap onto the same colour (more than 16 models recorded), the later one in the run takes
the next colour no other model of the run uses (`run_colours`). Random and oracle are no
bars: they are the grey floor and ceiling marks of `BOUND_STYLE`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

OKABE_ITO = (
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#009E73",  # bluish green
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#F0E442",  # yellow
)
TOL_MUTED = (
    "#332288",  # indigo
    "#117733",  # green
    "#882255",  # wine
    "#88CCEE",  # cyan
    "#44AA99",  # teal
    "#DDCC77",  # sand
    "#CC6677",  # rose
    "#999933",  # olive
    "#AA4499",  # purple
)
PALETTE: tuple[str, ...] = OKABE_ITO + TOL_MUTED

# The models this repository ships, in the order the README compares them; they hold slots
# 0, 1, 2 ... in every data folder, so the README's charts and a user's look alike.
SHIPPED_MODELS = ("dual-lite", "medemb-lite", "dual-lite@label-aware", "dual-lite@report")

BOUND_STYLE = {
    "random": {"color": "#A0A0A0", "dash": "dash", "label": "random (floor)"},
    "oracle": {"color": "#505050", "dash": "solid", "label": "oracle (ceiling)"},
}


def is_bound(name: str) -> bool:
    """Random and oracle are drawn as floor / ceiling marks, never given a palette colour."""
    return name in BOUND_STYLE


def default_slots(names: Iterable[str]) -> dict[str, int]:
    """Slots without a store: shipped models first, then the others in the order given."""
    order = [n for n in SHIPPED_MODELS] + [n for n in names if n not in SHIPPED_MODELS]
    return {name: slot for slot, name in enumerate(dict.fromkeys(order)) if not is_bound(name)}


def run_colours(names: Sequence[str], slots: Mapping[str, int] | None = None) -> dict[str, str]:
    """name -> colour for the models of one run (or one chart), all distinct.

    `slots` is the recorded slot of each model (`store.colours.model_slots`); a model without
    one is given the next slot after the highest known, in the order of `names`. Each model
    takes its slot's colour unless an earlier model of `names` already has it; then it takes
    the first palette colour the run does not use yet. Beyond 16 models in one run the palette
    is exhausted and the rest are drawn in shades interpolated between palette colours (still
    distinct, no longer guaranteed colour-blind safe)."""
    known = dict(slots) if slots is not None else default_slots(names)
    next_slot = max(known.values(), default=-1) + 1
    colours: dict[str, str] = {}
    used: set[str] = set()
    for name in dict.fromkeys(names):
        if is_bound(name):
            colours[name] = BOUND_STYLE[name]["color"]
            continue
        if name not in known:
            known[name], next_slot = next_slot, next_slot + 1
        colour = PALETTE[known[name] % len(PALETTE)]
        if colour in used:
            colour = next((c for c in PALETTE if c not in used), None) or _extra_colour(used)
        colours[name] = colour
        used.add(colour)
    return colours


def _extra_colour(used: set[str]) -> str:
    """A colour not in `used`, mixed halfway between two neighbouring palette colours."""
    for step in range(1, 64):
        for i, first in enumerate(PALETTE):
            second = PALETTE[(i + step) % len(PALETTE)]
            mixed = "#" + "".join(
                f"{(int(first[k : k + 2], 16) + int(second[k : k + 2], 16)) // 2:02X}"
                for k in (1, 3, 5)
            )
            if mixed not in used:
                return mixed
    raise ValueError("More models in one chart than the palette can tell apart.")
