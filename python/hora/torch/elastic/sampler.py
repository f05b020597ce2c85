"""ElasticSampler: a DistributedSampler that survives resets (Horovod's)."""

import math
import random

import torch.utils.data

from hora.common.basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset over the ranks of the current generation and remembers how much of the
    epoch has been processed, so that after a reset the rest of the epoch is re-sharded over the
    new ranks: no sample is processed twice or skipped within an epoch. As DistributedSampler,
    a shard is padded with the first samples when the rest does not divide evenly (at most
    size - 1 repeats, so that every rank runs the same number of steps).

    Keep it in the TorchState, call record_batch() after each batch and set_epoch() at the END
    of each epoch."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts `epoch`: forgets what was processed (call it when an epoch has ended)."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank processed one batch of batch_size samples."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """Records that every rank processed len(indices) samples."""
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Re-shards what is left of the epoch over the current ranks (after init)."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        # Every rank records the same batches, so the processed samples are a prefix of `order`.
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices + self.remaining_indices[:self.total_size - len(self.remaining_indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
