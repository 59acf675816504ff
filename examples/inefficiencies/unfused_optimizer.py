"""Rule unfused-optimizer: AdamW updating 64 small parameter tensors one at a time (foreach=False): several tiny
kernels per parameter in every step, each launched by the host. Fixed: AdamW(fused=True), one kernel per group."""

from __future__ import annotations

import torch
from _protocol import options, serve

LAYERS = 32  # a weight and a bias each: 64 parameters


def main() -> None:
    args = options(__doc__ or "", steps=200)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(LAYERS)]).cuda()
    kind = {"fused": True} if args.fixed else {"foreach": False}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **kind)
    x = torch.randn(32, 64, device="cuda")

    def run(n: int) -> None:
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()  # LINE_UNFUSED_OPTIMIZER

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
