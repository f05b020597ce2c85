"""Broadcasting model and optimizer state, and objects (horovod.torch.functions). Roots are
GLOBAL ranks, also with a process set, as in Horovod. (process_set on broadcast_parameters,
broadcast_optimizer_state and allgather_object is hora's, keyword-only, after Horovod's
arguments.)"""

import cloudpickle
import torch

from hora.common.basics import rank
from hora.common.handles import synchronize
from hora.common.process_sets import global_process_set
from hora.common.requests import auto_name
from hora.torch.gather_ops import allgather, broadcast_, broadcast_async_


def broadcast_parameters(params, root_rank, *, process_set=global_process_set):
    """Overwrites `params` (a state_dict, (name, tensor) pairs such as model.named_parameters(),
    or tensors such as model.parameters()) on every rank with root_rank's values, in place."""
    if isinstance(params, dict):
        params = sorted(params.items())
    else:
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    handles = []
    for name, p in params:
        if not torch.is_tensor(p):
            continue
        data = p.data if isinstance(p, torch.nn.Parameter) or p.requires_grad else p
        handles.append(broadcast_async_(data, root_rank, name=None if name is None else "broadcast." + name,
                                        process_set=process_set))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """`obj` as (global) rank root_rank holds it (pickled with cloudpickle), on every rank of the
    set. Other ranks may pass anything (e.g. None): unnamed calls are numbered, not named by the
    object's type as in Horovod, whose names differ when the ranks' objects do."""
    name = auto_name("broadcast_object", name, process_set)
    is_root = rank() == root_rank
    if is_root:
        payload = torch.frombuffer(bytearray(cloudpickle.dumps(obj)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload, length = None, torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name=f"broadcast_object.{name}.length", process_set=process_set)
    if payload is None:
        payload = torch.empty(int(length[0]), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=f"broadcast_object.{name}.data", process_set=process_set)
    if is_root:
        return obj
    return cloudpickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, *, process_set=global_process_set):
    """The list of every rank's `obj`, in rank order."""
    name = auto_name("allgather_object", name, process_set)
    payload = torch.frombuffer(bytearray(cloudpickle.dumps(obj)), dtype=torch.uint8)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=f"allgather_object.{name}.length",
                        process_set=process_set)
    data = allgather(payload, name=f"allgather_object.{name}.data", process_set=process_set)
    out, offset = [], 0
    for n in lengths.tolist():
        out.append(cloudpickle.loads(data[offset:offset + n].numpy().tobytes()))
        offset += n
    return out


def _zero_missing_gradients(optimizer, model):
    """What Horovod leaves behind when the state is not created yet: every trainable parameter
    without a gradient gets a zero one, sparse for SparseAdam and, with SGD, for the parameters of
    `model`'s sparse embeddings. (Horovod then takes a step to create the state; hora sends the
    root's state as it is instead, so a fresh optimizer stays fresh.)"""
    sparse = set()
    if model is not None:
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding) and module.sparse:
                sparse.update(id(p) for p in module.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or \
                        (isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    p.grad = p.grad.to_sparse()


def broadcast_optimizer_state(optimizer, root_rank, model=None, *, process_set=global_process_set):
    """Makes every rank's optimizer state (momentum buffers, Adam moments, step counts, the
    param_groups' hyper-parameters) equal to root_rank's, including when root_rank's state has
    not been created yet (then everyone's is cleared). `model` is Horovod's hint for finding
    sparse parameters, which the pickled state_dict does not need."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _zero_missing_gradients(optimizer, model)
    is_root = rank() == root_rank
    state = optimizer.state_dict() if is_root else None
    state = broadcast_object(state, root_rank, name="optimizer_state", process_set=process_set)
    if not is_root:
        optimizer.load_state_dict(state)
