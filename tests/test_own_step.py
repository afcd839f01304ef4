"""plan.fits / plan.largest_batch: a reader's own flax nnx model and train step, defined here,
planned for a v5e-8 and an H100 with the verdict and search the presets get."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from shared import plan
from shared.errors import BadInput

D, F, V, T = 256, 1024, 512, 64


class Tiny(nnx.Module):
    """An embedding, one MLP block and an unembedding: a step someone wrote themselves."""

    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(V, D, rngs=rngs)
        self.up = nnx.Linear(D, F, rngs=rngs)
        self.down = nnx.Linear(F, D, rngs=rngs)
        self.out = nnx.Linear(D, V, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens)
        return self.out(x + self.down(jax.nn.gelu(self.up(x))))


def _abstract_step():
    """The train step as a pure function of (params, opt_state, tokens), and its abstract
    parameters and optimizer state (nnx.eval_shape: nothing allocated)."""
    model = nnx.eval_shape(lambda: Tiny(nnx.Rngs(0)))
    graph, params = nnx.split(model)
    tx = optax.adamw(1e-3)
    opt_state = jax.eval_shape(tx.init, params)

    def step(params, opt_state, tokens):
        def loss(p):
            logits = nnx.merge(graph, p)(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step, params, opt_state


def _args(batch: int, length: int = T):
    step, params, opt_state = _abstract_step()
    tokens = jax.ShapeDtypeStruct((batch, length), jnp.int32)
    return step, (params, opt_state, tokens), (None, None, P("fsdp"))


@pytest.mark.parametrize("target", ["v5e-8", "h100-1"])
def test_a_step_written_here_gets_a_presets_verdict(target):
    step, args, specs = _args(8)
    point = plan.fits(step, args, target=target, specs=specs, name="tiny_step")
    assert point["fits"] and point["compiled"] and point["target"] == target
    assert 0 < point["bytes_per_device"] < point["hbm_bytes"]
    devices = 8 if target == "v5e-8" else 1
    assert point["devices"] == devices and point["worst"] == "tiny_step"
    # the parameters and both Adam moments are there at the least, per device: replicated
    weights = sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(args[0]))
    assert point["bytes_per_device"] >= 3 * weights
    # the default mesh is all fsdp, so P("fsdp") splits the batch (batch 1 once chose all tp)
    assert point["mesh_shape"] == {"fsdp": devices, "tp": 1}
    # no preset's notes: tunix's activation shardings and experts belong to its models
    assert not [n for n in point["notes"] if "tunix" in n or n.startswith("experts:")]


def test_an_own_step_on_a_gpu_says_it_has_no_roofline(capsys):
    from shared.plan.cli.point_view import print_point

    step, args, specs = _args(8)
    print_point(plan.fits(step, args, target="h100-1", specs=specs, name="tiny_step"))
    out = capsys.readouterr().out
    assert "roofline: n/a (a deviceless CUDA compile counts no FLOPs" in out
    assert "0.00 ms" not in out


def test_the_presets_search_finds_its_largest_batch():
    """A batch of activations against one weight: each row 8 MiB of arguments, so the answer
    is near 15.75 GiB / 8 MiB, found by the presets' search (a program this small compiles in
    seconds even at the boundary, where a train step's would make the compiler work to fit)."""

    def project(w, x):
        return (x @ w).sum()

    def make_args(batch):
        w = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)
        x = jax.ShapeDtypeStruct((batch, 4096, 1024), jnp.bfloat16)
        return (w, x), (None, P("fsdp"))

    result = plan.largest_batch(make_args, project, target="v5e-1", progress=False, name="project")
    largest, failing = result["max_batch"], result["first_not_fitting"]
    assert result["converged"] and 1800 < largest < 2016 and failing == largest + 1
    exact = {p["batch"]: p["fits"] for p in result["probes"] if not p["fast"]}
    assert exact[largest] and not exact[failing]  # the answer is an exact compile's verdict


def test_bad_input_gets_one_line():
    step, (params, opt_state, tokens), specs = _args(8)
    concrete = (params, opt_state, jnp.zeros((8, T), jnp.int32))
    with pytest.raises(BadInput, match=r"argument \[2\] is a concrete array \(8, 64\)"):
        plan.fits(step, concrete, target="v5e-8", specs=specs)
    with pytest.raises(BadInput, match="name mesh axis 'data', which the plan's mesh"):
        plan.fits(step, (params, opt_state, tokens), target="v5e-8", specs=(None, None, P("data")))

    def untraceable(params, opt_state, tokens):
        return int(tokens.sum())  # a Python int of a traced value

    with pytest.raises(BadInput, match="untraceable does not trace under jax.jit: "):
        plan.fits(untraceable, (params, opt_state, tokens), target="v5e-8", name="untraceable")
    with pytest.raises(BadInput, match="is not a function"):
        plan.fits(3, (tokens,), target="v5e-8")
