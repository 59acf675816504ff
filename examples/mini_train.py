"""A small CPU-only "training loop" with a known shape, used by the demo and the docs.

    python examples/mini_train.py [seconds]

Prints "ready <pid>" once running. Most of its time goes to matmul() under forward() and backward();
load_batch() and sgd_step() take the rest.
"""

from __future__ import annotations

import random
import sys
import time


def load_batch(n: int) -> list[list[float]]:
    return [[random.random() for _ in range(n)] for _ in range(n)]


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    cols = list(zip(*b, strict=True))
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in cols] for row in a]


def forward(w: list[list[float]], x: list[list[float]]) -> list[list[float]]:
    return matmul(w, x)


def backward(w: list[list[float]], grad: list[list[float]]) -> list[list[float]]:
    return matmul(grad, w)


def sgd_step(w: list[list[float]], g: list[list[float]], lr: float = 1e-3) -> None:
    for i, row in enumerate(g):
        wi = w[i]
        for j, v in enumerate(row):
            wi[j] -= lr * v


def train(seconds: float, n: int = 48) -> int:
    w = load_batch(n)
    steps = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        x = load_batch(n)
        y = forward(w, x)
        g = backward(w, y)
        sgd_step(w, g)
        steps += 1
    return steps


if __name__ == "__main__":
    print(f"ready {__import__('os').getpid()}", flush=True)
    steps = train(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0)
    print(f"done {steps} steps", flush=True)
