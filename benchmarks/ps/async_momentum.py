#!/usr/bin/env python3
"""One ps-async worker for the momentum probe of docs/parameter_servers.md ("ps-async and
momentum"): the CNN on the real Fashion-MNIST with mode="ps-async", the servers' SGD at the given
momentum and per-push learning rate, test accuracy every 50 steps. With --meet the evaluation
is the whole test set split across the workers and summed by an allreduce, which brings them
together every 50 steps (as ps_tbf.py's time-to-accuracy runs do); without it each worker
evaluates the first 2,000 test images alone. Rank 0 prints one line: HIST momentum lr meet
[(step, accuracy, last loss, parameters finite), ...].

  horarun -np 8 --servers 2 python benchmarks/ps/async_momentum.py --momentum 0.9 --lr 0.01 --meet
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import fashion_mnist as fm  # noqa: E402  (the model and the data loader)

import hora.torch as hvd  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--lr", type=float, default=0.01, help="per push")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--meet", action="store_true", help="evaluate together, through an allreduce")
    args = ap.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(1)
    model = fm.small_cnn()
    hvd.broadcast_parameters(model.state_dict(), 0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum),
                                   named_parameters=model.named_parameters(), mode="ps-async")
    x_train, y_train, x_test, y_test = fm.load(fm.DATA)
    mean, std = x_train.float().mean() / 255, x_train.float().std() / 255
    prepare = lambda x: ((x.float() / 255 - mean) / std).unsqueeze(1)
    order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(7))
    batch = 128 // size
    mine = slice(rank, len(x_test), size) if args.meet else slice(0, 2000)

    def accuracy():
        with torch.no_grad():
            correct = sum((model(prepare(x)).argmax(1) == y).float().sum().item()
                          for x, y in zip(x_test[mine].split(64), y_test[mine].split(64)))
        stats = torch.tensor([correct, float(len(y_test[mine]))])
        if args.meet:
            stats = hvd.allreduce(stats, op=hvd.Sum, name="eval")
        return (stats[0] / stats[1]).item()

    history = []
    for i in range(args.steps):
        idx = order[(i * 128 + rank * batch) % len(order):][:batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(prepare(x_train[idx])), y_train[idx])
        loss.backward()
        opt.step()
        if (i + 1) % 50 == 0:
            finite = all(torch.isfinite(p).all().item() for p in model.parameters())
            history.append((i + 1, round(accuracy(), 3), round(loss.item(), 3), finite))
    if rank == 0:
        print("HIST", args.momentum, args.lr, args.meet, history, flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
