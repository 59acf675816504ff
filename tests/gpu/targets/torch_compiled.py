"""A torch.compile'd MLP trained for 40 steps (tests/gpu/test_compiled.py reads its marked lines).

    python torch_compiled.py [default|break|recompile]

break: a print inside forward breaks the graph there; recompile: the batch changes size at step 20; graphs:
mode="reduce-overhead" (Inductor records its kernels in CUDA graphs and replays them)."""

from __future__ import annotations

import sys

import torch

MODE = sys.argv[1] if len(sys.argv) > 1 else "default"


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 256)
        self.fc2 = torch.nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc1(x)  # LINE_FC1
        x = torch.relu(x) * 2.0  # LINE_RELU
        x = x + 1.0  # LINE_ADD
        if MODE == "break":
            print("", end="")  # LINE_BREAK
        y = self.fc2(x)  # LINE_FC2
        return (y * y).mean()  # LINE_LOSS


def main() -> None:
    model = MLP().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = torch.compile(model, mode="reduce-overhead" if MODE == "graphs" else "default")
    for i in range(40):
        batch = 64 if MODE != "recompile" or i < 20 else 96
        loss = step(torch.randn(batch, 256, device="cuda"))  # LINE_CALL
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
