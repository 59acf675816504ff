"""A well-tuned training loop, for checking that the analyzer stays quiet: ResNet-50 (channels_last) or
GPT-2 small (random weights, SDPA attention, the fused tanh GELU) in bfloat16 autocast, fused optimizer
steps, no host synchronization in the step. --fixed is accepted and changes nothing."""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from _protocol import options, serve


def resnet50() -> Callable[[], None]:
    import torchvision

    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
    # batch 256: an H200 runs batch 64 faster than eager PyTorch can launch it (a host-bound step, rightly
    # reported as launch-bound: seen on the GPU host)
    x = torch.randn(256, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (256,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


def gpt2() -> Callable[[], None]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(activation_function="gelu_pytorch_tanh", attn_implementation="sdpa")
    model = GPT2LMHeadModel(config).cuda()  # random weights: no download
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, config.vocab_size, (32, 512), device="cuda")  # 8 x 512 is host-bound on an H200

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()

    return step


def main() -> None:
    model = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1] in ("resnet50", "gpt2") else "resnet50"
    args = options(__doc__ or "", steps=20)
    step = resnet50() if model == "resnet50" else gpt2()

    def run(n: int) -> None:
        for _ in range(n):
            step()

    serve(run, torch.cuda.synchronize, args, warmup=5)


if __name__ == "__main__":
    main()
