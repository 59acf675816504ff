"""A jitted JAX step called 50 times (tests/gpu/test_compiled.py reads its marked lines)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


@jax.jit
def deepctx_step(x: jax.Array) -> jax.Array:
    y = x @ x.T  # LINE_DOT
    z = jnp.tanh(y) * 2.0  # LINE_TANH
    return z + 1.0  # LINE_ADD


def main() -> None:
    x = jnp.ones((512, 512), dtype=jnp.float32)
    for _ in range(50):
        x = deepctx_step(x)  # LINE_CALL
    x.block_until_ready()


if __name__ == "__main__":
    main()
