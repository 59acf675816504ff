"""Rule recompiles: a compiled MLP called with a batch of a new size at every step, with Dynamo's automatic
dynamic shapes off: each call fails the size guard and compiles the model again. Fixed: torch.compile(...,
dynamic=True), one compile for every size."""

from __future__ import annotations

import itertools

import torch
import torch._dynamo.config as dynamo_config
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=4)
    torch.manual_seed(0)
    dynamo_config.automatic_dynamic_shapes = False  # each new size is a new specialization ...
    for limit in ("recompile_limit", "cache_size_limit"):  # ... and none falls back to eager
        if hasattr(dynamo_config, limit):
            setattr(dynamo_config, limit, 10_000)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)).cuda()
    step = torch.compile(model, dynamic=True) if args.fixed else torch.compile(model)
    sizes = itertools.count(64)

    def run(n: int) -> None:
        for _ in range(n):
            x = torch.randn(next(sizes), 256, device="cuda")
            step(x).sum().backward()  # LINE_RECOMPILES

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
