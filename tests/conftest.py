"""Test-wide set-up: 8 CPU devices for sharding tests, no network, no wandb, no TPU probing.

These must be set before jax is first imported, which is why they live here. Whole programs the
tests start (notebook kernels, training runs, sweep trials) get one CPU device instead, as on a
user's CPU machine: see `one_cpu_device`.
"""

import os

FORCED_DEVICES = "--xla_force_host_platform_device_count"
if FORCED_DEVICES not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {FORCED_DEVICES}=8").strip()
os.environ["JAX_PLATFORMS"] = "cpu"  # the tests are CPU tests, also on a GPU machine
os.environ["WANDB_MODE"] = "disabled"  # even where the machine sets offline/online
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")

import io  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402
import remote_lab  # noqa: E402

# The in-process tests are bound by compiling many small CPU programs, not by running them:
# without XLA's LLVM optimisations they take a third less (386 s -> 261 s on 2 cores). This only
# lowers the CPU/GPU backend's optimisation: TPU programs compiled deviceless came out
# byte-identical with and without it (five plan workloads, fast and exact), so plan verdicts
# under test are the compiler's own. Set here, not in the environment: the programs the tests
# start (notebook kernels, training runs) run real steps and evaluations, which it slows.
jax.config.update("jax_disable_most_optimizations", True)


def without_forced_devices(env) -> dict:
    """A copy of `env` without the eight virtual CPU devices set above."""
    env = dict(env)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(FORCED_DEVICES)]
    env.pop("XLA_FLAGS", None)
    return {**env, "XLA_FLAGS": " ".join(flags)} if flags else env


def cli_exit(main, argv: list[str], capsys) -> tuple[int, str]:
    """A command line's `main` run through its handler (shared.errors.run_cli) in this process,
    as `python -m` runs it without seconds of imports: its exit code and what it printed on
    stderr."""
    from shared.errors import run_cli

    with pytest.raises(SystemExit) as exit_:
        run_cli(main, argv)
    return exit_.value.code, capsys.readouterr().err


@pytest.fixture
def one_cpu_device(monkeypatch):
    """Programs this test starts see one CPU device, as a user's CPU machine gives them.

    Eight virtual devices on a 2-core CI machine make every step of a whole program two to
    three times slower (a tiny-model training run: 37 s against 77 s) and test nothing the
    in-process sharding tests do not; this test process itself keeps its eight devices.
    """
    env = without_forced_devices(os.environ)
    if "XLA_FLAGS" in env:
        monkeypatch.setenv("XLA_FLAGS", env["XLA_FLAGS"])
    else:
        monkeypatch.delenv("XLA_FLAGS", raising=False)


@pytest.fixture
def empty_plan_cache(tmp_path, monkeypatch):
    """The plan cache in this test's own folder: what a test checks is compiled here, never
    read from the checkout's .cache/plan (a developer's earlier plans) or another test's; nor
    what another test's compiles took of the host's memory (shared.plan.compiler.host_memory)."""
    from shared.plan import verdict
    from shared.plan.compiler import host_memory

    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path / "plan-cache")
    monkeypatch.setattr(host_memory, "_ONE_COMPILE", {})


# A short text for tokenizers trained inside the tests (no data download).
SONNET = """\
Shall I compare thee to a summer's day? Thou art more lovely and more temperate.
Rough winds do shake the darling buds of May, and summer's lease hath all too short a date.
Sometime too hot the eye of heaven shines, and often is his gold complexion dimm'd;
and every fair from fair sometime declines, by chance or nature's changing course untrimm'd.
But thy eternal summer shall not fade, nor lose possession of that fair thou ow'st;
nor shall Death brag thou wander'st in his shade, when in eternal lines to time thou grow'st.
So long as men can breathe or eyes can see, so long lives this, and this gives life to thee.
To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer
the slings and arrows of outrageous fortune, or to take arms against a sea of troubles.
""".splitlines()
TEST_VOCAB = 256  # the tiny models' vocabulary in the model tests = the test tokenizer's


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory):
    """A small SentencePiece model with Gemma's special ids (pad 0, eos 1, bos 2, unk 3)."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SONNET),
        model_writer=buf,
        vocab_size=TEST_VOCAB,
        model_type="bpe",
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    path = tmp_path_factory.mktemp("tok") / "tokenizer.model"
    path.write_bytes(buf.getvalue())
    return path


@pytest.fixture(scope="session")
def tok(tokenizer_file):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(tokenizer_file))


@pytest.fixture(scope="session")
def mesh1():
    import jax

    from shared.hardware.sharding import make_mesh

    return make_mesh((1, 1), jax.devices()[:1])


@pytest.fixture(scope="session")
def mesh8():
    from shared.hardware.sharding import make_mesh

    return make_mesh((8, 1))


@pytest.fixture(scope="session")
def mesh42():
    from shared.hardware.sharding import make_mesh

    return make_mesh((4, 2))


@pytest.fixture
def lab(tmp_path, tmp_path_factory):
    """A copy of the project with stand-in gcloud, colab and kaggle programs on PATH: the
    remote-execution tests' world (tests/remote_lab.py).

    One lab at a time across the xdist workers (a lock in the run's shared temp folder): run
    side by side they break each other's fake jobs (tests/test_remote_tpu_vm.py alone under
    `-n 2` failed 5 runs of 6 on 2026-11-26, a job gone or its status file missing; serially
    it always passes). Which shared thing they collide on is not found yet."""
    from filelock import FileLock

    with FileLock(tmp_path_factory.getbasetemp().parent / "remote-lab.lock"):
        yield from remote_lab.world(tmp_path)
