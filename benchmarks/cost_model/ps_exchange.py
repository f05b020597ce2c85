#!/usr/bin/env python3
"""One worker of a parameter-server exchange benchmark (run under `horarun --servers K`): registers
one float32 tensor of --bytes, pushes and pulls it --warmup + --iters times, and writes its mean
time per timed exchange to OUT.rank<r>.json. ps-sync: the sum, every worker in lock step (the
round's time); ps-async: lr 0, so the parameters stay what they were and only the exchange is timed.
The workers meet in a barrier before the timed exchanges: ps-async workers do not wait for each
other, and processes that start seconds apart (8 on 2 cores) would otherwise each have had the
servers' links to themselves.

usage: ps_exchange.py --bytes N --mode ps-sync|ps-async --iters N --warmup N --out PREFIX
"""

import argparse
import json
import os
import time

import numpy as np

from hora.common import basics, requests
from hora.common.parameter_servers import ParameterServerClient


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--mode", default="ps-sync", choices=["ps-sync", "ps-async"])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    basics.init()
    rank = basics.rank()
    elements = args.bytes // 4
    gradient = np.full(elements, rank + 1, dtype=np.float32)
    answer = np.zeros(elements, dtype=np.float32)
    initial = [answer.ctypes.data] if args.mode == "ps-async" else []
    client = ParameterServerClient([elements], args.mode, average=False, initial=initial)
    times = []
    for i in range(args.warmup + args.iters):
        if i == args.warmup:
            requests.barrier()
        start = time.perf_counter()
        client.step([gradient.ctypes.data], [answer.ctypes.data])
        times.append(time.perf_counter() - start)
    client.close()
    if args.mode == "ps-sync":  # the sum of 1 .. W: a wrong exchange must not pass for a fast one
        workers = basics.size()
        assert answer[0] == workers * (workers + 1) / 2 and answer[-1] == answer[0], answer[[0, -1]]
    timed = times[args.warmup:]
    with open(f"{args.out}.rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "bytes": args.bytes, "mode": args.mode, "servers": int(os.environ["HORA_PS_SERVERS"]),
                   "seconds": float(np.mean(timed)), "each": timed}, f)


if __name__ == "__main__":
    main()
