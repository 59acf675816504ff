"""An MLP training loop with known lines: forward, backward (run by the autograd engine's threads), step."""

from __future__ import annotations

import os
import sys

import torch

STEPS = 20


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(1024, 4096)
        self.fc2 = torch.nn.Linear(4096, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))  # LINE_FC1
        return self.fc2(h)  # LINE_FC2


def train(model: MLP, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)  # LINE_FORWARD
        loss.backward()  # LINE_BACKWARD
        opt.step()  # LINE_STEP
    torch.cuda.synchronize()


def main() -> None:
    model = MLP().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device="cuda")
    y = torch.randn(256, 1024, device="cuda")
    train(model, opt, x, y, 3)  # warm: kernels loaded, autograd threads started
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    train(model, opt, x, y, STEPS)
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
