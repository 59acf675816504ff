"""Rule dataloader-main-thread: a DataLoader with num_workers=0 builds every batch (CPU image augmentation)
in the training process, between GPU steps. Fixed: 6 worker processes, pinned batches, non-blocking copies."""

from __future__ import annotations

import torch
from _protocol import options, serve
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, 96, 96, generator=g)
        img = torch.flip(img, dims=[2]) if i % 2 else img
        img = (img - img.mean(dim=(1, 2), keepdim=True)) / (img.std(dim=(1, 2), keepdim=True) + 1e-5)
        return img[:, 8:88, 8:88].contiguous(), i % 10


def main() -> None:
    args = options(__doc__ or "", steps=150)
    torch.set_num_threads(1)  # one core per loader, the training process included
    workers = {"num_workers": 6, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 4} if args.fixed \
        else {"num_workers": 0}
    batches = iter(DataLoader(Images(), batch_size=64, **workers))
    w = torch.randn(3 * 80 * 80, 4096, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def run(n: int) -> None:
        for _ in range(n):
            x, y = next(batches)  # LINE_DATALOADER_MAIN_THREAD
            h = x.to("cuda", non_blocking=args.fixed).flatten(1).bfloat16() @ w
            for _ in range(6):
                h = torch.relu(h @ v)

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
