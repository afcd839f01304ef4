"""Dated, sourced prices: what a slice costs an hour, and what a number of hours costs.

Every row carries its value, unit, the date it was read and where it was read. Prices move (spot
prices daily): re-read the source before spending, and give a changed row a new date. A price
nobody publishes is `None` with the reason, and asking for it raises BadInput saying so.

Google Cloud rows are US dollars per chip-hour in one region, us-central1 (Iowa). Names follow
`shared.hardware`: `price_per_hour("v5e-8")` is 8 chips, `"v5p-8"` and `"tpu7x-8"` are 4 chips
(those names count TensorCores), `"h100"` is one GPU.

    from shared.hardware import prices
    prices.price_per_hour("v6e-8", "spot")       # dollars an hour for the whole slice
    prices.budget(30, "v5e-8")                   # dollars, and how many Kaggle sessions / weeks
    pandas.DataFrame(prices.table())             # every row with its date and source
"""

import math
from dataclasses import asdict, dataclass

from shared.errors import BadInput, choose, positive
from shared.hardware import parse_target

REGION = "us-central1"
HOURLY_KINDS = ("on-demand", "spot", "1y", "3y")  # 1y / 3y: committed-use prices
_PER_CHIP = ("$/chip-hour", "$/GPU-hour")


@dataclass(frozen=True)
class Price:
    item: str  # a chip of shared.hardware ('v5e', 'h100'), or an offer ('colab-pro', 'kaggle-tpu')
    kind: str  # 'on-demand', 'spot', '1y', '3y', 'monthly', 'compute-units', 'quota', ...
    value: float | None  # None: not published, `note` says why
    unit: str
    read: str  # the date the source was read (ISO)
    source: str  # where it was read
    note: str = ""


_READ = "2026-11-22"
# The Cloud Billing catalog that cloud.google.com/tpu/pricing is built from, as SkyPilot
# snapshots it; values per slice there, per chip here (the slice's figure is in the note).
_GCP = (
    "https://cloud.google.com/tpu/pricing, read from the billing-catalog snapshot "
    "https://github.com/skypilot-org/skypilot-catalog/blob/"
    "006059e0f18acb1341e22a27751e9f80df6ba92f/catalogs/v8/gcp/vms.csv (us-central1)"
)
_TRILLIUM_GA = (
    "https://neowin.net/amp/google-takes-on-nvidia-blackwell-gpus-with-the-new-"
    "trillium-tpus (quoting Google's Trillium GA announcement, Dec 2024)"
)
_NO_CUD = (
    "no committed-use price in the sources we could read on 2026-11-22; see "
    "https://cloud.google.com/tpu/pricing"
)
_TPU7X = (
    "not on the public price list: 'To get access to TPU7x, contact your account team' "
    "(https://docs.cloud.google.com/tpu/docs/tpu7x)"
)
_LAMBDA = (
    "https://lambda.ai/pricing (8x H100 SXM at $23.92/h, as several public snapshots of "
    "the page agree)"
)
_COLAB = (
    "https://colab.research.google.com/signup (Pro: 100, Pro+: 500 compute units a month); "
    "dollars as https://techcrunch.com/2022/09/29/google-colaboratory-launches-a-pay-as-"
    "you-go-option-premium-gpu-access/ reports them: $9.99 per 100 units, $49.99 per 500"
)
_COLAB_RATE = (
    "Google does not publish compute units per hour; the Colab UI shows the rate of "
    "the connected runtime (third-party measurements: T4 1.96 and A100 13.08 CU/h "
    "in 2022-09, https://www.currypurin.com/entry/2022/09/30/093810)"
)
_KAGGLE = (
    "https://www.kaggle.com/docs/tpu (read via a summary of that page; Kaggle's free TPU "
    "is a v5e-8 now, and Kaggle adjusts quotas: check your profile)"
)

# GPUs on Google Cloud, from the same billing-catalog snapshot: per GPU-hour, the accelerator's
# row plus the host machine type Compute Engine pairs with one GPU (the catalog prices the two
# apart), us-central1.
_GPU_READ = "2026-12-07"
# chip, the catalog's accelerator name, the host machine type of one GPU, and per price kind
# ($/h of one accelerator, $/h of that host)
_GCP_GPUS = (
    ("t4", "T4", "n1-standard-4", {"on-demand": (0.35, 0.19), "spot": (0.175, 0.05223)}),
    ("l4", "L4", "g2-standard-4", {"on-demand": (0.56004, 0.14679), "spot": (0.2231, 0.05874)}),
    (
        "a100-40g",
        "A100",
        "a2-highgpu-1g",
        {"on-demand": (2.93391, 0.73948), "spot": (1.4341, 0.36975)},
    ),
    (
        "a100-80g",
        "A100-80GB",
        "a2-ultragpu-1g",
        {"on-demand": (1.8462, 1.09962), "spot": (1.964, 0.54978)},
    ),
)
_A100_80G = "in this snapshot the accelerator's spot price is above its on-demand one"
_H200 = (
    "8x H200 74.49392 (spot 37.2472) + a3-ultragpu-8g 12.266 (spot 3.74713) $/h, over 8 GPUs; "
    "GCP rents H200s only in eights (us-central1-b)"
)
_KAGGLE_GPU = (
    "https://www.kaggle.com/docs/efficient-gpu-usage (read via third-party summaries of it, "
    "e.g. The Kaggle Book, Packt 2022: 'for GPU the numbers can vary from week to week'; "
    "about 30 h a week of 2x T4 or one P100 for a phone-verified account)"
)

PRICES: tuple[Price, ...] = (
    Price("v5e", "on-demand", 9.60 / 8, "$/chip-hour", _READ, _GCP, "v5litepod-8: $9.60/h"),
    Price("v5e", "spot", 1.95941 / 8, "$/chip-hour", _READ, _GCP, "v5litepod-8: $1.95941/h"),
    Price("v5e", "1y", None, "$/chip-hour", _READ, _GCP, _NO_CUD),
    Price("v5e", "3y", None, "$/chip-hour", _READ, _GCP, _NO_CUD),
    Price("v5p", "on-demand", 16.80 / 4, "$/chip-hour", _READ, _GCP, "v5p-8 (4 chips): $16.80/h"),
    Price("v5p", "spot", 3.3428 / 4, "$/chip-hour", _READ, _GCP, "v5p-8 (4 chips): $3.3428/h"),
    Price("v5p", "1y", None, "$/chip-hour", _READ, _GCP, _NO_CUD),
    Price("v5p", "3y", None, "$/chip-hour", _READ, _GCP, _NO_CUD),
    Price("v6e", "on-demand", 2.70, "$/chip-hour", _READ, _GCP, "v6e-1: $2.70/h"),
    Price("v6e", "spot", 0.54421, "$/chip-hour", _READ, _GCP, "v6e-1: $0.54421/h"),
    Price("v6e", "1y", 1.89, "$/chip-hour", _READ, _TRILLIUM_GA, "'starting at', region not named"),
    Price("v6e", "3y", 1.22, "$/chip-hour", _READ, _TRILLIUM_GA, "'starting at', region not named"),
    *(
        Price(
            "tpu7x",
            kind,
            None,
            "$/chip-hour",
            _READ,
            "https://docs.cloud.google.com/tpu/docs/tpu7x",
            _TPU7X,
        )
        for kind in HOURLY_KINDS
    ),
    Price(
        "h100",
        "on-demand",
        23.92 / 8,
        "$/GPU-hour",
        _READ,
        _LAMBDA,
        "Lambda has also listed $2.49/GPU-h for H100 SXM; re-read before budgeting",
    ),
    Price("h100", "spot", None, "$/GPU-hour", _READ, _LAMBDA, "Lambda sells no spot instances"),
    Price("h200", "on-demand", (74.49392 + 12.266) / 8, "$/GPU-hour", _GPU_READ, _GCP, _H200),
    Price("h200", "spot", (37.2472 + 3.74713) / 8, "$/GPU-hour", _GPU_READ, _GCP, _H200),
    *(
        Price(chip, kind, gpu + host, "$/GPU-hour", _GPU_READ, _GCP, note)
        for chip, accelerator, machine, prices_by_kind in _GCP_GPUS
        for kind, (gpu, host) in prices_by_kind.items()
        for note in [
            f"{accelerator} {gpu} + host {machine} {host} $/h (the billing catalog prices the "
            "two apart)" + (f"; {_A100_80G}" if chip == "a100-80g" else "")
        ]
    ),
    Price("colab-pro", "monthly", 9.99, "$/month", _READ, _COLAB),
    Price("colab-pro", "compute-units", 100, "compute units/month", _READ, _COLAB),
    Price("colab-pro+", "monthly", 49.99, "$/month", _READ, _COLAB),
    Price("colab-pro+", "compute-units", 500, "compute units/month", _READ, _COLAB),
    *(
        Price(
            f"colab-{runtime}",
            "compute-units/hour",
            None,
            "compute units/hour",
            _READ,
            "https://research.google.com/colaboratory/faq.html",
            _COLAB_RATE,
        )
        for runtime in ("t4", "l4", "a100", "h100", "v5e-1", "v6e-1")
    ),
    Price("kaggle-tpu", "on-demand", 0.0, "$/hour", _READ, _KAGGLE, "free; TPU v5e-8"),
    Price("kaggle-gpu", "on-demand", 0.0, "$/hour", _GPU_READ, _KAGGLE_GPU, "free; 2x T4 (t4-2)"),
    Price("kaggle-gpu", "quota", 30, "hours/week", _GPU_READ, _KAGGLE_GPU, "varies week to week"),
    Price("kaggle-tpu", "quota", 20, "hours/week", _READ, _KAGGLE),
    Price("kaggle-tpu", "session", 9, "hours/session", _READ, _KAGGLE),
)


def table() -> list[dict]:
    """Every row as a dict (value, unit, date read, source, note), e.g. for a DataFrame."""
    return [asdict(row) for row in PRICES]


def lookup(item: str, kind: str) -> Price:
    """The row for `item` and `kind`, BadInput naming what exists, or saying why it is None."""
    items = list(dict.fromkeys(row.item for row in PRICES))
    choose("priced item", item, items)
    kinds = [row.kind for row in PRICES if row.item == item]
    choose(f"{item} price kind", kind, kinds)
    row = next(row for row in PRICES if (row.item, row.kind) == (item, kind))
    if row.value is None:
        raise BadInput(f"no {kind} price for {item}: {row.note}")
    return row


def price_per_hour(target: str, kind: str = "on-demand") -> float:
    """Dollars an hour for a whole slice: v5e-8 is 8 chips, v5p-8/tpu7x-8 4 chips, h100 1 GPU."""
    choose("price kind", kind, HOURLY_KINDS)
    slice_ = parse_target(target)
    chips = [r.item for r in PRICES if r.unit in _PER_CHIP and r.kind == "on-demand"]
    choose("priced chip", slice_.chip.name, chips)
    return lookup(slice_.chip.name, kind).value * slice_.chips


def cost(target: str, hours: float, kind: str = "on-demand") -> float:
    """Dollars for `hours` of a whole slice at one kind of price."""
    positive(hours=hours)
    return price_per_hour(target, kind) * hours


def budget(hours: float, target: str = "v5e-8", kind: str = "on-demand") -> dict:
    """What `hours` of `target` cost at the table's prices, and how they fit Kaggle's free v5e-8.

    The Kaggle figures only mean something when the run fits a v5e-8 (16 GiB a chip).
    """
    session = lookup("kaggle-tpu", "session").value
    week = lookup("kaggle-tpu", "quota").value
    return {
        "hours": hours,
        "target": target,
        "kind": kind,
        "dollars": cost(target, hours, kind),
        "kaggle_dollars": lookup("kaggle-tpu", "on-demand").value * hours,
        "kaggle_sessions": math.ceil(hours / session),
        "kaggle_weeks": math.ceil(hours / week),
        "fits_one_kaggle_session": hours <= session,
        "fits_one_kaggle_week": hours <= week,
    }


def colab_hours(plan: str, units_per_hour: float) -> dict:
    """Runtime hours a Colab plan's monthly compute units buy, and their dollars an hour.

    Colab publishes no per-runtime rates: read `units_per_hour` off the Colab UI while connected.
    """
    choose("Colab plan", plan, ("colab-pro", "colab-pro+"))
    positive(units_per_hour=units_per_hour)
    dollars, units = lookup(plan, "monthly").value, lookup(plan, "compute-units").value
    return {
        "plan": plan,
        "hours_per_month": units / units_per_hour,
        "dollars_per_hour": dollars / units * units_per_hour,
    }
