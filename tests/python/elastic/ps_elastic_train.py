"""An elastic hora.torch job whose gradients travel through parameter servers, for
tests/python/test_elastic_parameter_servers.py.

A linear model (4 float32 weights, from zero) whose gradient at step s on rank r is
gradient(s, r); SGD with momentum steps on what the servers answer (ps-sync: the mean over the
generation's workers). Every step appends (step, size) to the committed state, so the final
weights must equal a numpy replay of that log (reference_weights), and the log must hold every
step exactly once. Each step prints "step <s> gen=<g> rank=<r> size=<n> pid=<pid>"; an error that
makes the job re-form prints "rank <r> caught <kind>: <message>" before hvd.elastic.run handles
it. Each rank writes <out>/rank<r>.json at the end, with the optimizer's step count (Adam's: in
ps-async the servers' count of applied pushes, carried across re-forms by the commits)."""

import argparse
import json
import os
import time

import numpy

LR, MOMENTUM = 0.1, 0.5
COMMIT_EVERY = 5


def gradient(step, rank):
    return numpy.array([(step + 1) * (rank + 1) + i for i in range(4)], dtype=numpy.float64) / 100.0


def reference_weights(log):
    """The weights after the logged steps, by numpy: torch's SGD with momentum on the mean of the
    ranks' gradients at each step's size (the momentum buffer is committed and restored with the
    rest of the state, so the replay runs it across the re-forms too)."""
    w, v = numpy.zeros(4), None
    for step, size in log:
        g = numpy.mean([gradient(step, r) for r in range(size)], axis=0)
        v = g if v is None else MOMENTUM * v + g
        w -= LR * v
    return w


def main():
    import torch

    import hora.torch as hvd
    from hora.common.identity import identity

    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--mode", default="ps-sync")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])  # adam: ps-async only (no replay)
    args = p.parse_args()

    hvd.init()
    model = torch.nn.Linear(4, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    inner = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM) if args.optimizer == "sgd" else \
        torch.optim.Adam(model.parameters(), lr=LR)
    optimizer = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters(), mode=args.mode)
    state = hvd.elastic.TorchState(model, optimizer, step=0, log=[])
    ran = []

    @hvd.elastic.run
    def train(state):
        try:
            while state.step < args.steps:
                optimizer.zero_grad()
                g = torch.from_numpy(gradient(state.step, hvd.rank())).float().reshape(1, 4)
                (model.weight * g).sum().backward()
                optimizer.step()
                ran.append(state.step)
                state.log.append((state.step, hvd.size()))
                state.step += 1
                generation = identity()["generation"]
                print(f"step {state.step} gen={generation} rank={hvd.rank()} size={hvd.size()} pid={os.getpid()}",
                      flush=True)
                time.sleep(args.step_sleep)
                if state.step % COMMIT_EVERY == 0:
                    state.commit()
        except hvd.HoraInternalError as e:
            print(f"rank {hvd.rank()} caught {type(e).__name__}: {e}", flush=True)
            raise

    train(state)
    hvd.barrier()  # every worker's pushes are in: the optimizer's step counts them all
    steps = [float(s["step"]) for s in optimizer.state_dict()["state"].values() if "step" in s]
    with open(os.path.join(args.out, f"rank{hvd.rank()}.json"), "w") as f:
        json.dump({"weights": model.weight.detach().double().numpy().reshape(4).tolist(), "log": state.log,
                   "ran": ran, "size": hvd.size(), "optimizer_step": steps[0] if steps else None}, f)


if __name__ == "__main__":
    main()
