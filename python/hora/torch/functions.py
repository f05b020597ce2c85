"""Broadcasting model and optimizer state, and objects (horovod.torch.functions)."""

import cloudpickle
import torch

from hora.torch.basics import global_process_set
from hora.torch.mpi_ops import _auto_name, allgather, broadcast_, broadcast_async_, synchronize


def broadcast_parameters(params, root_rank, prefix=None, process_set=global_process_set):
    """Overwrites `params` (a state_dict, or (name, tensor) pairs such as
    model.named_parameters()) on every rank with root_rank's values, in place."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        if params and not isinstance(params[0], tuple):
            raise ValueError("broadcast_parameters: expected a state_dict or (name, tensor) pairs")
    else:
        params = list(params)
    handles = []
    for name, p in params:
        if not torch.is_tensor(p):
            continue
        data = p.data if isinstance(p, torch.nn.Parameter) or p.requires_grad else p
        handles.append(broadcast_async_(data, root_rank, name=(prefix or "") + "broadcast." + name,
                                        process_set=process_set))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """`obj` as root_rank holds it (pickled with cloudpickle), on every rank. Other ranks may
    pass anything (e.g. None): unnamed calls are numbered, not named by the object's type."""
    name = _auto_name("broadcast_object", name)
    if process_set.rank() == root_rank:
        payload = torch.frombuffer(bytearray(cloudpickle.dumps(obj)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload, length = None, torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name=f"broadcast_object.{name}.length", process_set=process_set)
    if payload is None:
        payload = torch.empty(int(length[0]), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=f"broadcast_object.{name}.data", process_set=process_set)
    if process_set.rank() == root_rank:
        return obj
    return cloudpickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's `obj`, in rank order."""
    name = _auto_name("allgather_object", name)
    payload = torch.frombuffer(bytearray(cloudpickle.dumps(obj)), dtype=torch.uint8)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=f"allgather_object.{name}.length",
                        process_set=process_set)
    data = allgather(payload, name=f"allgather_object.{name}.data", process_set=process_set)
    out, offset = [], 0
    for n in lengths.tolist():
        out.append(cloudpickle.loads(data[offset:offset + n].numpy().tobytes()))
        offset += n
    return out


def broadcast_optimizer_state(optimizer, root_rank, prefix=None, process_set=global_process_set):
    """Makes every rank's optimizer state (momentum buffers, Adam moments, step counts, the
    param_groups' hyper-parameters) equal to root_rank's, including when root_rank's state has
    not been created yet (then everyone's is cleared)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state = optimizer.state_dict() if process_set.rank() == root_rank else None
    state = broadcast_object(state, root_rank, name=(prefix or "") + "optimizer_state", process_set=process_set)
    if process_set.rank() != root_rank:
        optimizer.load_state_dict(state)
