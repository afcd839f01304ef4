"""How a `shared.plan.slices.cheapest` answer is shown: one paragraph, a table, a figure.

The figure is what a person renting wants to take in at a glance: hours against dollars, one
point per slice or GPU machine (circles TPU slices, squares GPU machines, every one an exact
compile), the frontier joined and the choice starred.
"""

from __future__ import annotations

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from shared.sizing import human

GiB = 2**30


def _money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 1 else f"${value:.3g}"


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3g} h"


def describe(result: dict) -> str:
    """The answer in a few lines: the slice, its setting, hours and dollars, and how to rent it."""
    job, choice = result["job"], result["choice"]
    what = (
        f"{result['request']['workload']} {result['request']['model']} for "
        f"{job['amount']:,.4g} {job['unit']}"
    )
    if choice is None:
        within = f" within {result['within_hours']:g} h" if result["within_hours"] else ""
        return f"no rented slice fits {what}{within}: see each slice's row for why"
    mesh = "x".join(str(n) for n in choice["mesh_shape"].values())
    lines = [
        f"cheapest for {what}: {choice['target']} ({choice['hosts']} host"
        f"{'s' if choice['hosts'] > 1 else ''}, mesh {mesh}) at batch {choice['batch']}"
        f"{', remat ' + choice['remat'] if choice['remat'] != 'none' else ''}: about "
        f"{_hours(choice['hours'])} and {_money(choice['dollars'])} {result['price_kind']} "
        f"(at least {_hours(choice['roofline_hours'])}, "
        f"{_money(choice['dollars_at_roofline'])}, at the roofline)",
        f"  {choice['bytes_per_device'] / GiB:.2f} of {choice['hbm_bytes'] / GiB:.2f} GiB a "
        f"device (exact compile); {choice['assumed_efficiency']:.0%} of the roofline assumed: "
        f"{choice['efficiency_source']}; price read {choice['price_read']}",
        f"  rent it: {result['commands']['create']}",
    ]
    if result["commands"]["run"]:
        lines.append(f"  run it:  {result['commands']['run']}")
    unsettled = [
        r["target"]
        for r in result["rows"]
        if r["status"] == "not compiled"
        and r.get("bound_dollars") is not None
        and r["bound_dollars"] < choice["dollars_at_roofline"]
    ]
    if unsettled:
        lines.append(
            f"  not compiled though their FLOP bound is below this answer's roofline: "
            f"{', '.join(unsettled)} (a search limit, each row says which)"
        )
    lines.append(
        f"  {result['compiled_slices']} slices compiled ({result['compiles']} compiles); "
        f"the frontier: "
        + ", ".join(
            f"{r['target']} {_hours(r['hours'])} {_money(r['dollars'])}" for r in result["frontier"]
        )
    )
    return "\n".join(lines)


def summary_row(result: dict) -> dict:
    """One job's answer as one row: the slice, its setting, hours, dollars, compiles."""
    c = result["choice"] or {}
    return {
        "workload": result["request"]["workload"],
        "model": result["request"]["model"],
        "amount": result["job"]["amount"],
        "unit": result["job"]["unit"],
        "slice": c.get("target", "none fits"),
        "batch": c.get("batch"),
        "remat": c.get("remat"),
        "GiB_per_device": c["bytes_per_device"] / GiB if c else None,
        "hours": c.get("hours"),
        "dollars": c.get("dollars"),
        "price": result["price_kind"],
        "slices_compiled": result["compiled_slices"],
        "compiles": result["compiles"],
    }


COLUMNS = ("slice", "status", "batch", "GiB/device", "hours", "dollars", "why")


def table_rows(result: dict) -> list[dict]:
    """One row per slice, as the table prints it."""
    rows = []
    for r in result["rows"]:
        used = r.get("bytes_per_device", r.get("floor_bytes"))
        rows.append(
            {
                "slice": r["target"],
                "status": r["status"],
                "batch": r.get("batch", "-"),
                "GiB/device": "-"
                if used is None
                else f"{used / GiB:.2f}/{r['hbm_bytes'] / GiB:.2f}"
                + ("" if "bytes_per_device" in r else " floor"),
                "hours": _hours(r.get("hours")),
                "dollars": _money(r.get("dollars")),
                "why": r.get("why", ""),
            }
        )
    return rows


def table(result: dict) -> str:
    """Every slice's row as fixed-width text."""
    rows = table_rows(result)
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS[:-1]}
    line = "  ".join(f"{c:<{widths[c]}}" for c in COLUMNS[:-1]) + "  why"
    out = [line]
    for r in rows:
        out.append("  ".join(f"{str(r[c]):<{widths[c]}}" for c in COLUMNS[:-1]) + f"  {r['why']}")
    return "\n".join(out)


def plot(result: dict, ax) -> None:
    """Hours against dollars on log axes: every slice with both, the frontier, the choice."""
    styles = {
        False: dict(marker="o", color="tab:blue", label="TPU slice, exact compile"),
        True: dict(marker="s", color="tab:orange", label="GPU machine, exact compile (no GPU)"),
    }
    for gpu, style in styles.items():
        points = [
            r
            for r in result["rows"]
            if r["status"] == "fits"
            and r.get("gpu", False) is gpu
            and r.get("hours")
            and r.get("dollars") is not None
        ]
        if not points:
            continue
        ax.plot([r["hours"] for r in points], [r["dollars"] for r in points], ls="", **style)
        for r in points:
            ax.annotate(
                r["target"],
                (r["hours"], r["dollars"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    front = result["frontier"]
    if front:
        ax.plot(
            [r["hours"] for r in front],
            [r["dollars"] for r in front],
            "k-",
            lw=0.8,
            label="frontier",
        )
    if result["choice"] is not None:
        c = result["choice"]
        ax.plot(c["hours"], c["dollars"], "*", ms=16, color="green", label="cheapest")
    if result["within_hours"]:
        ax.axvline(result["within_hours"], color="red", ls="--", label="deadline")
    ax.set_xscale("log")
    ax.set_yscale("log")
    # 1-2-5 ticks, labelled as hours and dollars: a range inside one decade keeps its labels,
    # and the minor ones, which overlap on short ranges, stay blank
    for axis, unit in ((ax.xaxis, "{:,.3g} h"), (ax.yaxis, "${:,.3g}")):
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _, unit=unit: unit.format(value)))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("hours (estimated: roofline / assumed efficiency)")
    ax.set_ylabel(f"dollars ({result['price_kind']})")
    job = result["job"]
    ax.set_title(
        f"{result['request']['model']} {result['request']['workload']}, "
        f"{human(job['amount'])} {job['unit']}: which slice",
        fontsize=9,
    )
    ax.legend(fontsize=7)
