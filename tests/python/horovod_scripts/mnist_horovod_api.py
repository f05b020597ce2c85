"""A training script written only against Horovod's public API (`import horovod`,
`horovod.torch`, `horovod.run`), in the shape of Horovod's own PyTorch MNIST example, for
tests/python/test_horovod_compat.py. It trains one epoch on the MNIST-format files in
--data-dir, then checks what a Horovod user relies on: every rank ends with the same
parameters, and the averaged test accuracy is printed by rank 0.

    horovodrun -np 2 python mnist_horovod_api.py --data-dir DIR     (or --num-proc 2)
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision import datasets, transforms

import horovod
import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--data-dir", required=True)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--limit", type=int, default=12000, help="training samples used")
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--num-proc", type=int)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=5)
        self.fc = nn.Linear(8 * 12 * 12, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv(x), 2))
        return F.log_softmax(self.fc(x.flatten(1)), dim=1)


def load(data_dir, train, limit=None):
    data = datasets.MNIST(data_dir, train=train, download=True,
                          transform=transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.29,), (0.35,))]))
    if limit is not None:
        data = torch.utils.data.Subset(data, range(limit))
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())
    return torch.utils.data.DataLoader(data, batch_size=args.batch_size, sampler=sampler), sampler


def main(args):
    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    train_loader, train_sampler = load(args.data_dir, True, args.limit)
    test_loader, test_sampler = load(args.data_dir, False, 2000)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average)

    model.train()
    train_sampler.set_epoch(1)
    for data, target in train_loader:
        optimizer.zero_grad()
        F.nll_loss(model(data), target).backward()
        optimizer.step()

    model.eval()
    correct = torch.tensor(0.0)
    with torch.no_grad():
        for data, target in test_loader:
            correct += model(data).argmax(1).eq(target).sum()
    accuracy = hvd.allreduce(correct / len(test_sampler), name="avg_accuracy").item()

    # Every rank must hold rank 0's parameters bit for bit.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    same = bool(torch.equal(hvd.broadcast(flat, root_rank=0, name="final_params"), flat))
    if hvd.rank() == 0:
        print(f"accuracy={accuracy:.4f} ranks={hvd.size()} horovod={horovod.__version__}")
    print(f"rank {hvd.rank()} parameters equal rank 0's: {same}")
    return accuracy, same


if __name__ == "__main__":
    args = parser.parse_args()
    if args.num_proc:
        results = horovod.run(main, args=(args,), num_proc=args.num_proc)
        print(f"horovod.run results: {results}")
    else:
        main(args)
