"""Rule launch-bound-loop: 100 tiny elementwise kernels per step, launched one at a time from one line.
Fixed: the step captured once in a CUDA graph and replayed (one launch per step)."""

from __future__ import annotations

import torch
from _protocol import options, serve

REPEATS = 100


def main() -> None:
    args = options(__doc__ or "", steps=500)
    x = torch.ones(256, device="cuda")
    out = torch.empty_like(x)

    def step() -> None:
        y = x
        for _ in range(REPEATS):
            y = y * 1.0001  # LINE_LAUNCH_BOUND_LOOP
        out.copy_(y)

    graph = None
    if args.fixed:
        side = torch.cuda.Stream()  # warm up off the capturing stream, as torch.cuda.graphs asks
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()

    def run(n: int) -> None:
        for _ in range(n):
            if graph is not None:
                graph.replay()
            else:
                step()

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
