"""A jitted JAX function, compiled after the profiler attached, called at a known line."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp

N_CALLS = 50


@jax.jit
def deepctx_step(x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ x.T) * 2.0 + 1.0


def run(x: jax.Array) -> jax.Array:
    for _ in range(N_CALLS):
        x = deepctx_step(x)  # LINE_JAX
    return x.block_until_ready()


def main() -> None:
    x = jnp.ones((512, 512), dtype=jnp.float32)
    (x + 1).block_until_ready()  # the runtime is up; deepctx_step is not compiled yet
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    run(x)
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
