"""torch.distributed all_reduce over gloo, timed as hora-bench times allreduce.

Run under horarun (which gives HORA_RANK / HORA_SIZE); MASTER_ADDR and MASTER_PORT name
torch's own rendezvous:
    horarun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29512 python gloo_allreduce_bench.py \
        -b 4 -e 64M -f 4 -n 20 -w 5 --json out.json
torch's all_reduce works in place, so only the in-place column is filled.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-b", default="4")
    p.add_argument("-e", default="64M")
    p.add_argument("-f", type=float, default=4)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(1)
    rank, n = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=n)
    bus = 2.0 * (n - 1) / n
    rows = []
    size = parse_size(a.b)
    while size <= parse_size(a.e):
        count = size // 4
        idx = torch.arange(count, dtype=torch.int64)
        t = ((idx + rank) % 5).to(torch.float32)
        dist.all_reduce(t)
        want = sum(((idx + r) % 5) for r in range(n)).to(torch.float32) if count else t
        wrong = int((t != want).sum().item()) if count else 0
        for _ in range(a.w):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(a.n):
            dist.all_reduce(t)
        us = torch.tensor([(time.perf_counter() - start) / a.n * 1e6], dtype=torch.float64)
        dist.all_reduce(us, op=dist.ReduceOp.MAX)
        us = us.item()
        algbw = count * 4 / (us * 1e-6) / 1e9
        rows.append({"size": count * 4, "count": count, "type": "float32", "redop": "sum",
                     "in_place": {"time_us": us, "algbw": algbw, "busbw": algbw * bus, "wrong": wrong}})
        if rank == 0:
            print(f"{count * 4:12d} in-place {us:10.2f} us {algbw * bus:8.3f} GB/s busbw, {wrong} wrong", flush=True)
        size = int(size * a.f)
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"op": "allreduce", "ranks": n, "type": "float32", "rows": rows}, f, indent=2)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
