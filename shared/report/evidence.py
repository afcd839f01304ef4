"""A notebook's Evidence cell: where the numbers its Takeaway quotes come from.

Every committed result file says how it was made (the command, the date, the versions, the
host's load) in slightly different words, because the benchmarks that wrote them grew one at a
time. `evidence` prints those facts for each file a notebook quotes, beside the versions this
run has, so a reader sees at the end of the story whether the answer above was computed with
the stack they are running.
"""

from shared.report.committed import committed
from shared.versions import versions

# Header keys a committed file may hold, in the order a reader wants them.
_FACTS = ("date", "command", "commands", "versions", "jax", "host", "host_cpus", "load_average")


def facts(name: str) -> dict:
    """The provenance a committed result file NAME records, or {"missing": ...} without it."""
    data = committed(name)
    if not isinstance(data, dict):
        return {"missing": f"benchmarks/results/{name}.json is not here (a package install?)"}
    return {key: data[key] for key in _FACTS if key in data}


def _line(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items() if v)
    if isinstance(value, list):
        return "; ".join(str(v) for v in value)
    return str(value)


def evidence(*names: str) -> None:
    """Print, for each committed result file a notebook quotes, how it was made (`facts`); then
    this run's versions. Returns nothing, so a notebook's last line shows only the print."""
    for name in names:
        print(f"benchmarks/results/{name}.json")
        for key, value in facts(name).items():
            print(f"  {key}: {_line(value)}")
    print(f"this run: {_line(versions())}")
