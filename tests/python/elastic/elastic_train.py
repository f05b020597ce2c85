"""An elastic training job for the tests (tests/python/test_elastic_job.py): a linear model on
a synthetic dataset with hora.torch.elastic's TorchState and ElasticSampler.

Every step allgathers the indices of the samples each rank trained on; rank 0 keeps them with
the state and appends them to --log at each commit, so the log holds exactly the committed
work: a test checks that every sample of every epoch is there exactly once, across resets.
Each step prints "step <time> gen=<generation> rank=<rank> size=<size> pid=<pid> ...". Before
hvd.init() it prints the rank variables horarun started it with, as scripts read them.
"""

import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import hora.torch as hvd
from hora.common.identity import identity

p = argparse.ArgumentParser()
p.add_argument("--log", required=True)
p.add_argument("--samples", type=int, default=240)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--commit-every", type=int, default=2)
p.add_argument("--step-sleep", type=float, default=0.05)
args = p.parse_args()

print("started with " + " ".join(f"{name}={os.environ.get('HOROVOD_' + name)}" for name in
                                 ("HOSTNAME", "RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")),
      flush=True)
hvd.init()
torch.manual_seed(0)
dataset = TensorDataset(torch.randn(args.samples, 4), torch.randn(args.samples, 1), torch.arange(args.samples))
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0, seen=[])
state.register_reset_callbacks([lambda: print(f"reset: size {hvd.size()} rank {hvd.rank()}", flush=True)])


def commit(state):
    if hvd.rank() == 0 and state.seen:
        with open(args.log, "a") as log:
            log.writelines(f"{epoch} {index}\n" for epoch, index in state.seen)
        state.seen = []
    state.commit()


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        for i, (x, y, index) in enumerate(DataLoader(dataset, batch_size=args.batch, sampler=state.sampler)):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            trained = hvd.allgather(index, name="elastic.indices")
            if hvd.rank() == 0:
                state.seen.extend((state.epoch, int(v)) for v in trained)
            state.sampler.record_batch(i, args.batch)
            state.step += 1
            ident = identity()
            print(f"step {time.time():.3f} gen={ident['generation']} rank={hvd.rank()} size={hvd.size()} "
                  f"pid={os.getpid()} step={state.step}", flush=True)
            if state.step % args.commit_every == 0:
                commit(state)
            time.sleep(args.step_sleep)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        commit(state)


train(state)
# Every rank ends with the same parameters: min and max over the ranks agree bit for bit.
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
same = torch.equal(hvd.allreduce(flat, op=hvd.Min, name="elastic.min"), hvd.allreduce(flat, op=hvd.Max, name="elastic.max"))
print(f"done rank={hvd.rank()} size={hvd.size()} identical={same}", flush=True)
