#!/usr/bin/env python3
"""One worker of a parameter-server exchange benchmark (run under `horarun --servers K`): registers
one float32 tensor of --bytes, pushes and pulls it, and writes its time per exchange to
OUT.rank<r>.json.

ps-sync: the sum, every worker in lock step; --warmup exchanges, then --iters timed (the round's
time). ps-async: lr 0, so the parameters stay what they were and only the exchange is timed. Its
workers do not wait for each other, and what is timed is their steady state: workers that start
together first push, then pull, all at once (as in ps-sync), and only over several exchanges
drift apart until one worker's push overlaps another's reply. So after a first exchange from a
common start, every worker exchanges for a common span of wall time, --warmup + --iters times as
long as the slowest first exchange, and times those of its exchanges that lie wholly in the last
--iters of it: every worker is still exchanging then. (3 exchanges from a common start, as timed
before, measured that drift: 8 workers' exchanges of 4 MiB at 1 Gbit/s took 0.37-0.54, 0.31-0.43,
then 0.26-0.32 s in one run.)

usage: ps_exchange.py --bytes N --mode ps-sync|ps-async --iters N --warmup N --out PREFIX
"""

import argparse
import json
import os
import time

import numpy as np

from hora.common import basics, ops, requests
from hora.common.parameter_servers import ParameterServerClient


def slowest(seconds):
    """The largest of every worker's `seconds` (an allreduce with Max)."""
    value = np.array([seconds], dtype=np.float64)
    handle = requests.enqueue("ps_exchange.slowest", requests.ALLREDUCE, "float64", value.shape, value.ctypes.data,
                              value.ctypes.data, reduce_op=ops.Max)
    handle.wait()
    return float(value[0])


def lock_step(exchange, args):
    """ps-sync: the times of --iters exchanges after --warmup."""
    times = []
    for i in range(args.warmup + args.iters):
        start = time.perf_counter()
        exchange()
        times.append(time.perf_counter() - start)
    return times[args.warmup:]


def steady_state(exchange, args):
    """ps-async: the times of this worker's exchanges that lie in the common timed span."""
    start = time.perf_counter()
    exchange()
    first = slowest(time.perf_counter() - start)  # also lines the workers up again
    begin = time.perf_counter() + args.warmup * first
    end = begin + args.iters * first
    times = []
    while True:
        start = time.perf_counter()
        if start >= end:
            break
        exchange()
        stop = time.perf_counter()
        if start >= begin and stop <= end:
            times.append(stop - start)
    if not times:
        raise SystemExit(f"rank {basics.rank()}: no exchange lay wholly in the timed span of {end - begin:.3f} s")
    return times


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
    requests.barrier()
    exchange = lambda: client.step([gradient.ctypes.data], [answer.ctypes.data])  # noqa: E731
    timed = (lock_step if args.mode == "ps-sync" else steady_state)(exchange, args)
    client.close()
    if args.mode == "ps-sync":  # the sum of 1 .. W: a wrong exchange must not pass for a fast one
        workers = basics.size()
        assert answer[0] == workers * (workers + 1) / 2 and answer[-1] == answer[0], answer[[0, -1]]
    with open(f"{args.out}.rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "bytes": args.bytes, "mode": args.mode, "servers": int(os.environ["HORA_PS_SERVERS"]),
                   "seconds": float(np.mean(timed)), "each": timed}, f)


if __name__ == "__main__":
    main()
