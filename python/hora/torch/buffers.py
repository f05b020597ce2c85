"""torch tensors <-> the raw buffers of hora.common.requests: the dtypes hora.torch takes, the
checks of a tensor argument, and the request that reads one tensor and writes another.

Tensors cross to the engine as data pointers: a contiguous CPU tensor is reduced where it lies
(the in-place forms write into it, the others into a fresh tensor, without an extra copy).
Outputs whose shape only negotiation knows (allgather, alltoall, reducescatter) are allocated by
the engine and wrapped by torch without a copy."""

import torch

from hora.common import handles, requests

# The dtypes every collective takes: horovod.torch's on the CPU, plus bfloat16, and uint8, int8
# and int16 in the reductions too (horovod.torch refuses those three there; hora reduces them,
# wrapping as integer sums do). No collective takes bool, as in horovod.torch, which raises
# ValueError for it; so does check(). (The core reduces every type of hora/types.h, bool
# included; the libtorch frontend takes them all.)
DATA_TYPES = {
    torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}


def check(tensor, what):
    """TypeError / ValueError, as horovod.torch, for what hora.torch cannot send."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{what}: hora runs on CPU tensors; got one on {tensor.device}")
    if tensor.dtype not in DATA_TYPES:
        raise ValueError(f"{what}: Tensor type {tensor.type()} ({tensor.dtype}) is not supported; {what} takes "
                         + ", ".join(str(t) for t in DATA_TYPES))


def enqueue(tensor, output, name, kind, **options):
    """requests.enqueue for a contiguous `tensor` (and `output`, or None when the engine
    allocates the result); options as there."""
    return requests.enqueue(name, kind, DATA_TYPES[tensor.dtype], tensor.shape, tensor.data_ptr(),
                            output.data_ptr() if output is not None else 0, **options)


def engine_output(handle, dtype):
    """The tensor the engine allocated for `handle`, without a copy."""
    raw, shape = requests.output_buffer(handle, torch.empty((), dtype=dtype).element_size())
    return torch.from_numpy(raw).view(dtype).reshape(shape)


def register_into(tensor, output, name, kind, **options):
    """The handle of a collective that reads `tensor` and writes `output` (the same tensor for
    the in-place forms). A non-contiguous one goes through a contiguous copy, copied back into
    `output` when the collective completes."""
    source = tensor if tensor.is_contiguous() else tensor.contiguous()
    target = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)
    handle = enqueue(source, target, name, kind, **options)

    def finish():
        if target is not output:
            output.copy_(target)
        return output

    return handles.register(handles.Pending([handle], (tensor, source, output, target), finish))

