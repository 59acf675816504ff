"""Rule graph-break: a compiled block whose forward asks the GPU for a number in its middle (`.item()` to pick a
scale): Dynamo breaks the graph there, the host waits for the GPU, and the rest runs as a second graph at every
call. Fixed: the choice made on the GPU with torch.where, one graph, no wait."""

from __future__ import annotations

import torch
from _protocol import options, serve

FIXED = False


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(128, 128) for _ in range(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:4]:
            x = torch.relu(layer(x))
        if FIXED:
            x = x * torch.where(x.mean() > 0, 0.5, 2.0)
        elif x.mean().item() > 0:  # LINE_GRAPH_BREAK
            x = x * 0.5
        else:
            x = x * 2.0
        for layer in self.layers[4:]:
            x = torch.relu(layer(x))
        return x


def main() -> None:
    global FIXED
    args = options(__doc__ or "", steps=300)
    FIXED = args.fixed
    torch.manual_seed(0)
    step = torch.compile(Block().cuda())
    x = torch.randn(64, 128, device="cuda")

    def run(n: int) -> None:
        for _ in range(n):
            step(x)

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
