#!/usr/bin/env python3
"""Where one rank's training step goes: the median wall time of forward, backward, the wait in
synchronize() (hora) and the optimizer step, and, per thread, CPU time, time runnable but
waiting for a CPU, and runs on a CPU per step (schedstat, train_bench.thread_cpu). Random data,
the models of train_bench.py (global batch: CNN 128, WRN 32), 1 compute thread per rank.

usage (every rank prints one RESULT line):
  horarun -np 2 .venv/bin/python benchmarks/training/step_probe.py hora --model wrn --steps 4
  MASTER_ADDR=127.0.0.1 MASTER_PORT=P RANK=r WORLD_SIZE=2 .venv/bin/python \\
      benchmarks/training/step_probe.py ddp|ddp-nosync ...          (one process per rank)
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bench as tb  # noqa: E402  (thread_cpu, build, GLOBAL_BATCH)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["hora", "ddp", "ddp-nosync"])
    ap.add_argument("--model", default="wrn", choices=["cnn", "wrn"])
    ap.add_argument("--width", type=int, default=10)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    if args.kind == "hora":
        import hora.torch as hvd
        hvd.init()
        rank, size, barrier = hvd.rank(), hvd.size(), hvd.barrier
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, size, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
    torch.manual_seed(1)
    model = tb.build(args.model, args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.kind == "hora":
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), 0)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    batch = tb.GLOBAL_BATCH[args.model] // size
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    phases = {"forward": [], "backward": [], "synchronize": [], "optimizer": []}

    def step(record):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        if args.kind == "ddp-nosync":
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()
        t2 = time.perf_counter()
        if args.kind == "hora":
            opt.synchronize()
        t3 = time.perf_counter()
        if args.kind == "hora":
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        t4 = time.perf_counter()
        if record:
            for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                phases[name].append(seconds * 1000)

    for _ in range(args.warmup):
        step(False)
    barrier()
    before, start = tb.thread_cpu(), time.perf_counter()
    for _ in range(args.steps):
        step(True)
    barrier()
    elapsed, after = time.perf_counter() - start, tb.thread_cpu()
    threads = []
    for tid, (name, ns, waited, slices) in after.items():
        _, ns0, waited0, slices0 = before.get(tid, (name, 0, 0, 0))
        if ns - ns0 > 0:
            threads.append({"name": "main" if tid == os.getpid() else name, "cpu_ms": (ns - ns0) / 1e6 / args.steps,
                            "runq_ms": (waited - waited0) / 1e6 / args.steps,
                            "runs": (slices - slices0) / args.steps})
    threads.sort(key=lambda t: -t["cpu_ms"])
    print("RESULT " + json.dumps({"kind": args.kind, "rank": rank, "step_ms": elapsed / args.steps * 1000,
                                  **{name: statistics.median(v) for name, v in phases.items()},
                                  "threads": threads}), flush=True)
    if args.kind == "hora":
        hvd.shutdown()
    else:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
