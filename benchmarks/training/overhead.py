#!/usr/bin/env python3
"""What hora's engine and Python binding cost per call and per training step, where the bytes
are too few to matter (run under horarun):

    horarun -np 2 python benchmarks/training/overhead.py

(a) one synchronous hvd.allreduce of a 1-element tensor: Python -> binding -> engine
    negotiation (response cache) -> collective -> back, per call;
(b) a training step of a model of 24 small layers (24 x 2 tensors, 1.3 K parameters) with
    DistributedOptimizer, against the same step without it: the per-step cost of the hooks,
    48 enqueues, the negotiation and the waits.
"""

import time

import torch

import hora.torch as hvd


def main():
    hvd.init()
    torch.set_num_threads(1)
    x = torch.ones(1)
    for _ in range(200):
        hvd.allreduce(x, name="warm")
    hvd.barrier()
    n = 3000
    t = time.perf_counter()
    for _ in range(n):
        hvd.allreduce(x, name="tiny")
    per_call = (time.perf_counter() - t) / n * 1e6

    def make_model():
        torch.manual_seed(0)
        layers = []
        for _ in range(24):
            layers += [torch.nn.Linear(7, 7), torch.nn.Tanh()]
        return torch.nn.Sequential(*layers)

    data = torch.randn(16, 7)
    plain_model, wrapped_model = make_model(), make_model()
    plain = torch.optim.SGD(plain_model.parameters(), lr=1e-3)
    wrapped = hvd.DistributedOptimizer(torch.optim.SGD(wrapped_model.parameters(), lr=1e-3),
                                       named_parameters=wrapped_model.named_parameters())

    def steps(model, opt, count):
        for _ in range(count):
            opt.zero_grad()
            model(data).sum().backward()
            opt.step()

    results = {}
    runs = (("without", plain_model, plain), ("with", wrapped_model, wrapped)) * 2
    for name, model, opt in runs:
        steps(model, opt, 50)
        hvd.barrier()
        t = time.perf_counter()
        steps(model, opt, 500)
        results.setdefault(name, []).append((time.perf_counter() - t) / 500 * 1e6)
    hvd.barrier()
    if hvd.rank() == 0:
        without, with_ = min(results["without"]), min(results["with"])
        print(f"| {hvd.size()} ranks | allreduce of 1 float, per call | {per_call:.1f} us |")
        print(f"| {hvd.size()} ranks | step of 48 tensors without DistributedOptimizer | {without:.1f} us |")
        print(f"| {hvd.size()} ranks | the same step with it | {with_:.1f} us |")
        print(f"| {hvd.size()} ranks | engine + binding cost per step (48 tensors) | {with_ - without:.1f} us "
              f"({(with_ - without) / 48:.1f} us per tensor) |")
    hvd.shutdown()


if __name__ == "__main__":
    main()
