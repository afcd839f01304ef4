"""Headless execution beyond this machine: a GCP TPU VM, a Colab runtime, a Kaggle kernel.

Glue over three vendors' command lines -- `gcloud` (Google Cloud SDK), `colab`
(google-colab-cli, which needs Python >= 3.12, so it lives beside .venv, not in it) and
`kaggle` -- so that the same notebooks and the same PARAMS as `make execute` run somewhere with
a TPU. Nothing here talks to Google itself, which is why the tests can drive all of it with
stand-in programs on PATH.

TPU VM: tools/tpu_vm.py ships the working tree and runs `make execute` there, detached.
Colab: `colab new` a runtime with one accelerator, `colab exec -f` the notebook with PARAMS
injected, `colab stop` it whatever happened (`colab run` takes a Python script, not a notebook).
Kaggle: push the notebook with PARAMS injected as a private TPU kernel, pull its output later.

    python -m tools.remote tpu-execute --tpu NAME --zone ZONE [--project P] [--worker all]
                                      [--nb 06] [--no-wait] -- -p MODE device
    python -m tools.remote tpu-fetch|tpu-logs|tpu-stop --tpu NAME --zone ZONE
    python -m tools.remote colab-execute --nb 06 [--tpu v6e1 | --gpu T4] -- -p MODE device
    python -m tools.remote kaggle-push --nb 06 [--user NAME] -- -p MODE device
    python -m tools.remote kaggle-pull --nb 06 [--user NAME]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from shared.errors import BadInput, choose, run_cli
from shared.paths import ROOT
from tools.notebooks import notebook_sources, parse_parameters
from tools.tpu_vm import TpuVm, collect, need_command, resolve, tpu_execute, tpu_logs, tpu_stop

COLAB_TPUS = ("v5e1", "v6e1")  # `colab new --tpu` choices; the CLI maps any other to v6e1
COLAB_GPUS = ("T4", "L4", "G4", "H100", "A100")  # `colab new --gpu`; any other becomes an A100
COLAB_DEFAULT = ("--tpu", "v6e1")  # the runtime when neither TPU= nor GPU= is given
COLAB_TIMEOUT = 24 * 3600  # seconds `colab exec` waits on a quiet cell (its own default is 30)
COLAB_MISSING = (
    "the `colab` command is missing: Google's Colab CLI needs Python >= 3.12, so "
    "install it beside .venv, not in it: `uv tool install --python 3.12 "
    "google-colab-cli` (or `pipx install --python python3.12 google-colab-cli`); "
    "its first command asks you to sign in with Google"
)
COLAB_OFF_PATH = (
    "`colab` is installed in {folder} but that folder is not on PATH: run "
    "`uv tool update-shell` (or `pipx ensurepath`) and open a new shell"
)
KAGGLE_TPU = "TpuV5E8"  # Kaggle's machine_shape / --accelerator name of the TPU v5e-8
KAGGLE_MISSING = "the `kaggle` command is missing: pip install kaggle"


def one_notebook(select: str | None) -> Path:
    """The single notebook NB= names (Colab and Kaggle run one notebook per runtime)."""
    if not select:
        raise BadInput("NB= is missing: pick one notebook, e.g. NB=06")
    sources = notebook_sources(select)
    if len(sources) > 1:
        names = ", ".join(s.stem for s in sources)
        raise BadInput(f"NB={select} matches {len(sources)} notebooks ({names}): pick one")
    return sources[0]


def prepare_notebook(source: Path, params: list[str], folder: Path) -> Path:
    """The notebook as an .ipynb with PARAMS injected (papermill's --prepare-only), so the copy
    a hosted runtime executes carries them; kernel `python3`, the one Colab and Kaggle run."""
    import jupytext  # imported here: a second of start-up that the TPU VM commands do not need
    import papermill

    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    folder.mkdir(parents=True, exist_ok=True)
    staged = folder / f"{source.stem}.ipynb"
    papermill.execute_notebook(
        notebook,
        str(staged),
        parameters=parse_parameters(params),
        prepare_only=True,
        kernel_name="python3",
        progress_bar=False,
    )
    return staged


def notebook_errors(path: Path) -> list[str]:
    """'cell N: Name: value' for every error output of an executed notebook."""
    cells = json.loads(path.read_text())["cells"]
    return [
        f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
        for i, cell in enumerate(cells)
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]


def colab_command() -> str:
    """The `colab` executable on PATH, or one line saying how to install it (or find it)."""
    found = shutil.which("colab")
    if found:
        return found
    folder = Path.home() / ".local" / "bin"  # where `uv tool` and pipx install it
    raise BadInput(
        COLAB_OFF_PATH.format(folder=folder) if (folder / "colab").is_file() else COLAB_MISSING
    )


def colab_runtime(gpu: str | None, tpu: str | None) -> list[str]:
    """`colab new`'s accelerator flags: GPU= or TPU= (TPU v6e1 when neither), checked here
    because the CLI quietly swaps a name it does not know for an A100 or a v6e1."""
    if gpu and tpu:
        raise BadInput(
            f"GPU={gpu} and TPU={tpu}: a Colab runtime has one accelerator, give only one of them"
        )
    if gpu:
        return ["--gpu", choose("Colab GPU", gpu.upper(), COLAB_GPUS)]
    if tpu:
        return ["--tpu", choose("Colab TPU", tpu.lower(), COLAB_TPUS)]
    return list(COLAB_DEFAULT)


def colab_execute(
    select: str | None, params: list[str], gpu: str | None = None, tpu: str | None = None
) -> int:
    """Run one prepared notebook on a fresh Colab runtime, then release it.

    `colab new` provisions the runtime; `colab exec -f` runs the notebook's code cells and
    writes `<stem>_output.ipynb` beside the input, without failing on a cell error, so we read
    the executed copy; `colab stop` releases the runtime even after an error or Ctrl-C. The
    runtime gets the notebook, not this tree: its first cell clones the repository on Colab.
    """
    accelerator = colab_runtime(gpu, tpu)
    source = one_notebook(select)
    colab = colab_command()
    staged = prepare_notebook(source, params, ROOT / "runs" / "colab")
    executed = staged.with_name(f"{staged.stem}_output.ipynb")
    before = executed.stat().st_mtime_ns if executed.exists() else None
    session = f"tpu-budget-lab-{source.stem[:2]}-{uuid.uuid4().hex[:6]}"
    code = subprocess.run([colab, "new", "-s", session, *accelerator]).returncode
    if code:  # `colab new` said why: not signed in, no quota for that accelerator, ...
        return code
    try:
        code = subprocess.run(
            [colab, "exec", "-s", session, "-f", str(staged), "--timeout", str(COLAB_TIMEOUT)]
        ).returncode
    finally:
        subprocess.run([colab, "stop", "-s", session])
    if not executed.exists() or executed.stat().st_mtime_ns == before:
        if code:
            return code
        raise BadInput(
            f"`colab exec` wrote no {executed.relative_to(ROOT)}: upgrade it "
            f"(uv tool upgrade google-colab-cli, or pipx upgrade google-colab-cli)"
        )
    print(f"wrote {executed.relative_to(ROOT)}", file=sys.stderr)
    errors = notebook_errors(executed)
    if errors:
        print(f"{executed.name} failed at {errors[0]}", file=sys.stderr)
    return code or (1 if errors else 0)


def _kaggle_dirs() -> list[Path]:
    return [
        Path(os.environ.get("KAGGLE_CONFIG_DIR", Path.home() / ".kaggle")),
        Path.home() / ".kaggle",
    ]


def kaggle_user(user: str | None) -> str:
    """Check that the kaggle CLI has credentials, and return the user name kernels live under."""
    env = os.environ
    files = [
        d / f for d in _kaggle_dirs() for f in ("kaggle.json", "access_token", "credentials.json")
    ]
    if not (
        env.get("KAGGLE_API_TOKEN")
        or (env.get("KAGGLE_USERNAME") and env.get("KAGGLE_KEY"))
        or any(f.exists() for f in files)
    ):
        raise BadInput(
            "no Kaggle credentials: create an API token at "
            "https://www.kaggle.com/settings and save it as ~/.kaggle/access_token "
            "(or export KAGGLE_API_TOKEN; legacy: ~/.kaggle/kaggle.json or "
            "KAGGLE_USERNAME and KAGGLE_KEY)"
        )
    user = user or env.get("KAGGLE_USERNAME")
    for legacy in (d / "kaggle.json" for d in _kaggle_dirs()):
        if not user and legacy.exists():
            user = json.loads(legacy.read_text()).get("username")
    if not user:
        raise BadInput("cannot tell your Kaggle user name: pass KAGGLE_USER=<your user name>")
    return user


def kernel_ref(source: Path, user: str) -> str:
    """`user/slug`; Kaggle derives the slug from the title, so the title is the slug itself."""
    return f"{user}/tpu-budget-lab-{source.stem.replace('_', '-')}"


def kaggle_push(select: str | None, params: list[str], user: str | None, accelerator: str) -> int:
    """Stage the prepared notebook with its kernel-metadata.json and push it (Kaggle runs it)."""
    need_command("kaggle", KAGGLE_MISSING)
    source = one_notebook(select)
    ref = kernel_ref(source, kaggle_user(user))
    folder = ROOT / "runs" / "kaggle" / ref.split("/")[1] / "push"
    staged = prepare_notebook(source, params, folder)
    metadata = {
        "id": ref,
        "title": ref.split("/")[1],
        "code_file": staged.name,
        "language": "python",
        "kernel_type": "notebook",
        "is_private": True,
        "enable_gpu": False,
        "enable_tpu": True,
        "machine_shape": accelerator,
        "enable_internet": True,  # the first cell clones and installs the repository
        "dataset_sources": [],
        "competition_sources": [],
        "kernel_sources": [],
        "model_sources": [],
    }
    (folder / "kernel-metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    # --accelerator repeats machine_shape: a kaggle CLI too old to know either fails loudly
    # here instead of silently running on a CPU.
    result = subprocess.run(
        ["kaggle", "kernels", "push", "-p", str(folder), "--accelerator", accelerator],
        capture_output=True,
        text=True,
    )
    print(result.stdout.strip())
    if result.returncode or "push error" in result.stdout.lower():
        lines = (result.stderr + result.stdout).strip().splitlines() or ["no output"]
        raise BadInput(f"kaggle kernels push {ref} failed: {lines[-1]}")
    print(
        f"pushed {ref}: `make kaggle-pull NB={select}` fetches its output once it has run",
        file=sys.stderr,
    )
    return 0


def kaggle_pull(select: str | None, user: str | None) -> int:
    """Fetch the output of the kernel's last run into runs/kaggle/<slug>/output; status 1 if
    that run failed, one line and status 2 if it has not finished."""
    need_command("kaggle", KAGGLE_MISSING)
    source = one_notebook(select)
    ref = kernel_ref(source, kaggle_user(user))
    status = subprocess.run(["kaggle", "kernels", "status", ref], capture_output=True, text=True)
    first = (status.stdout.strip().splitlines() or [status.stderr.strip()])[0]
    if status.returncode:
        raise BadInput(f"kaggle kernels status {ref} failed: {first}")
    outcome = first.lower()  # 'user/slug has status "KernelWorkerStatus.COMPLETE"' or "complete"
    if not any(word in outcome for word in ("complete", "error", "cancel")):
        raise BadInput(f"{first}: not finished yet, pull again later")
    out = ROOT / "runs" / "kaggle" / ref.split("/")[1] / "output"
    code = subprocess.run(["kaggle", "kernels", "output", ref, "-p", str(out), "-o"]).returncode
    if code:
        return code
    print(f"{first}; output in {out.relative_to(ROOT)}", file=sys.stderr)
    return 0 if "complete" in outcome else 1


def _vm(args) -> TpuVm:
    for flag, value in (("TPU", args.tpu), ("ZONE", args.zone)):
        if not value:
            raise BadInput(
                f"{flag}= is missing: name the TPU VM and its zone, e.g. "
                f"make {args.command} TPU=my-v5e ZONE=us-west4-a"
            )
    return TpuVm(args.tpu, args.zone, args.project or None, args.worker or None)


def _params(args) -> list[str]:
    """The `-p NAME VALUE` tokens after `--`, checked here before anything leaves this machine."""
    tokens = args.parameters[1:] if args.parameters[:1] == ["--"] else args.parameters
    parse_parameters(tokens)
    return tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.remote",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    tpu = {
        name: sub.add_parser(name, help=help)
        for name, help in (
            ("tpu-execute", "run make execute on a TPU VM and copy runs/ results/ back"),
            ("tpu-fetch", "wait for the TPU VM's job and copy runs/ results/ back"),
            ("tpu-logs", "show (follow) the TPU VM job's log"),
            ("tpu-stop", "stop the TPU VM's job"),
        )
    }
    for command in tpu.values():
        command.add_argument("--tpu", default="", help="TPU VM name")
        command.add_argument("--zone", default="")
        command.add_argument("--project", default="")
        command.add_argument("--worker", default="", help="'all' on a multi-host slice")
    tpu["tpu-execute"].add_argument("--nb", help="notebook prefix, e.g. 06")
    tpu["tpu-execute"].add_argument("--no-wait", action="store_true")
    colab = sub.add_parser("colab-execute", help="run one notebook on a Colab TPU/GPU runtime")
    colab.add_argument("--tpu", help=f"{' or '.join(COLAB_TPUS)} (the default: {COLAB_DEFAULT[1]})")
    colab.add_argument("--gpu", help=", ".join(COLAB_GPUS))
    push = sub.add_parser("kaggle-push", help="push one notebook as a Kaggle TPU kernel")
    push.add_argument("--accelerator", default=KAGGLE_TPU)
    pull = sub.add_parser("kaggle-pull", help="fetch the Kaggle kernel's output into runs/")
    for command in (colab, push, pull):
        command.add_argument("--nb", help="notebook prefix, e.g. 06")
    for command in (push, pull):
        command.add_argument("--user", help="Kaggle user name (default: from the credentials)")
    for command in (tpu["tpu-execute"], colab, push):
        command.add_argument("parameters", nargs=argparse.REMAINDER, help="-- -p NAME VALUE")
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:  # Ctrl-C while waiting or following: say what still runs where
        if not args.command.startswith("tpu-"):
            return 130
        vm = _vm(args)
        print(
            f"\nthe job on {vm.name} runs on: `make tpu-fetch {vm.make_args}` collects it, "
            f"`make tpu-stop {vm.make_args}` stops it",
            file=sys.stderr,
        )
        return 130


def _dispatch(args) -> int:
    if args.command == "colab-execute":
        return colab_execute(args.nb, _params(args), args.gpu, args.tpu)
    if args.command == "kaggle-push":
        return kaggle_push(args.nb, _params(args), args.user, args.accelerator)
    if args.command == "kaggle-pull":
        return kaggle_pull(args.nb, args.user)
    vm = _vm(args)
    if args.command == "tpu-stop":
        return tpu_stop(vm)
    if args.command == "tpu-logs":
        return tpu_logs(vm)
    if args.command == "tpu-fetch":
        return collect(resolve(vm))
    if args.nb:
        notebook_sources(args.nb)  # a mistyped NB fails here, not on the VM
    return tpu_execute(vm, args.nb, _params(args), wait=not args.no_wait)


if __name__ == "__main__":
    run_cli(main)
