"""Meshes, batch checks and sharded initialisation on 8 CPU devices."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from shared.errors import BadInput
from shared.hardware import sharding
from shared.plan.compiler.compiled import compiled_memory

V, D = 4096, 64


class Table(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.table = nnx.Param(
            nnx.initializers.normal()(rngs.params(), (V, D), jnp.float32),
            out_sharding=("fsdp", None),
        )


def test_mesh_shapes():
    assert dict(sharding.make_mesh().shape) == {"fsdp": 8, "tp": 1}
    assert dict(sharding.make_mesh("2x4").shape) == {"fsdp": 2, "tp": 4}
    for bad in ("3x3", "8", "axb", (0, 8)):
        with pytest.raises(BadInput, match="8x1"):
            sharding.make_mesh(bad)
    for shape in ((2, 4), (8, 1)):  # a name reads back as its shape, from either form
        as_dict = dict(zip(sharding.AXES, shape, strict=True))
        named = {sharding.mesh_name(shape), sharding.mesh_name(as_dict)}
        assert [sharding.mesh_shape(name, 8) for name in named] == [shape]


def test_batch_must_divide_fsdp():
    mesh = sharding.make_mesh("4x2")
    assert sharding.check_batch(8, mesh) == 8
    with pytest.raises(BadInput, match="multiple of 4"):
        sharding.check_batch(6, mesh)


def test_sharded_init_never_holds_the_whole_table():
    mesh = sharding.make_mesh()
    factory = lambda: Table(nnx.Rngs(0))  # noqa: E731
    shardings = sharding.state_shardings(sharding.abstract_module(factory, mesh), mesh)
    with jax.set_mesh(mesh):
        compiled = jax.jit(lambda: nnx.state(factory()), out_shardings=shardings).lower().compile()
    stats = compiled_memory(compiled)
    table_bytes = V * D * 4
    assert stats["output_bytes"] == table_bytes // 8
    assert stats["output_bytes"] + stats["temp_bytes"] < table_bytes  # never a whole table
    module = sharding.sharded_init(factory, mesh)
    shards = module.table[...].addressable_shards
    assert len(shards) == 8 and all(s.data.shape == (V // 8, D) for s in shards)
