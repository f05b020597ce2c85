"""hora.torch's API against horovod.torch 0.28's, written out here by hand: the export list, every
public function's parameters (names, order, defaults), what each call returns, and the errors
Horovod raises at the same point with the same exception types."""

import inspect
import warnings

import numpy as np
import pytest
import torch

import hora.torch as hvd
import hora.torch.mpi_ops as mpi_ops

# horovod/torch/__init__.py's names (all but `elastic`, which is another piece of work).
HOROVOD_TORCH_EXPORTS = """
Compression allgather_object broadcast_object broadcast_optimizer_state broadcast_parameters
allreduce allreduce_async allreduce_ allreduce_async_
grouped_allreduce grouped_allreduce_async grouped_allreduce_ grouped_allreduce_async_
sparse_allreduce_async allgather allgather_async grouped_allgather grouped_allgather_async
broadcast broadcast_async broadcast_ broadcast_async_ alltoall alltoall_async
reducescatter reducescatter_async grouped_reducescatter grouped_reducescatter_async
join barrier poll synchronize init shutdown is_initialized start_timeline stop_timeline
size local_size cross_size rank local_rank cross_rank
mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built
nccl_built ddl_built ccl_built cuda_built rocm_built
ProcessSet global_process_set add_process_set remove_process_set
Average Sum Adasum Min Max Product HorovodInternalError DistributedOptimizer SyncBatchNorm
""".split()

# Names scripts import from horovod.torch.mpi_ops besides the collectives.
HOROVOD_MPI_OPS_EXTRAS = """
is_homogeneous Compression ProcessSet global_process_set add_process_set remove_process_set
""".split()

ALLREDUCE = "tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=G"
GROUPED_ALLREDUCE = ALLREDUCE.replace("tensor,", "tensors,")
COMPRESSED = "average=None, name=None, compression=C, op=None"
REDUCESCATTER = "name=None, op=A, process_set=G, prescale_factor=1.0, postscale_factor=1.0"
REDUCESCATTER_COMPRESSED = REDUCESCATTER.replace("name=None,", "name=None, compression=C,")

# Horovod's parameters, in order (G: global_process_set, C: Compression.none, A: Average).
# hora may add parameters only after these, with defaults.
HOROVOD_SIGNATURES = {
    "allreduce_async": ALLREDUCE,
    "allreduce_async_": ALLREDUCE,
    "allreduce_": ALLREDUCE,
    "allreduce": ALLREDUCE.replace("average=None, name=None, op=None", COMPRESSED),
    "grouped_allreduce_async": GROUPED_ALLREDUCE,
    "grouped_allreduce_async_": GROUPED_ALLREDUCE,
    "grouped_allreduce_": GROUPED_ALLREDUCE,
    "grouped_allreduce": GROUPED_ALLREDUCE.replace("average=None, name=None, op=None", COMPRESSED),
    "sparse_allreduce_async": "tensor, name, op, process_set=G",
    "allgather_async": "tensor, name=None, process_set=G",
    "allgather": "tensor, name=None, process_set=G",
    "grouped_allgather_async": "tensors, name=None, process_set=G",
    "grouped_allgather": "tensors, name=None, process_set=G",
    "broadcast_async": "tensor, root_rank, name=None, process_set=G",
    "broadcast": "tensor, root_rank, name=None, process_set=G",
    "broadcast_async_": "tensor, root_rank, name=None, process_set=G",
    "broadcast_": "tensor, root_rank, name=None, process_set=G",
    "alltoall_async": "tensor, splits=None, name=None, process_set=G",
    "alltoall": "tensor, splits=None, name=None, process_set=G",
    "reducescatter_async": "tensor, " + REDUCESCATTER,
    "reducescatter": "tensor, " + REDUCESCATTER_COMPRESSED,
    "grouped_reducescatter_async": "tensors, " + REDUCESCATTER,
    "grouped_reducescatter": "tensors, " + REDUCESCATTER_COMPRESSED,
    "poll": "handle",
    "synchronize": "handle",
    "join": "device=-1",
    "barrier": "process_set=G",
    "init": "comm=None, process_sets=None",
    "start_timeline": "file_path, mark_cycles=False",
    "broadcast_parameters": "params, root_rank",
    "broadcast_optimizer_state": "optimizer, root_rank, model=None",
    "broadcast_object": "obj, root_rank=0, name=None, process_set=G",
    "allgather_object": "obj, name=None",
    "add_process_set": "process_set",
    "remove_process_set": "process_set",
    "DistributedOptimizer": "optimizer, named_parameters=None, compression=C, backward_passes_per_step=1, op=A, "
                            "gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False, "
                            "process_set=G",
}

NO_DEFAULT = object()


def parse(spec):
    values = {"G": hvd.global_process_set, "C": hvd.Compression.none, "A": hvd.Average, "None": None,
              "False": False}
    params = []
    for item in spec.split(", "):
        name, _, default = item.partition("=")
        if not default:
            params.append((name, NO_DEFAULT))
        else:
            params.append((name, values[default] if default in values else float(default) if "." in default
                           else int(default)))
    return params


def test_every_horovod_torch_name_is_exported():
    missing = [name for name in HOROVOD_TORCH_EXPORTS if not hasattr(hvd, name)]
    assert missing == []
    for name in HOROVOD_TORCH_EXPORTS[5:]:  # the collectives and basics, also from mpi_ops
        if name not in ("DistributedOptimizer", "SyncBatchNorm"):
            assert getattr(mpi_ops, name) is getattr(hvd, name), name
    assert [n for n in HOROVOD_MPI_OPS_EXTRAS if not hasattr(mpi_ops, n)] == []


@pytest.mark.parametrize("name", sorted(HOROVOD_SIGNATURES))
def test_signature_matches_horovod(name):
    params = list(inspect.signature(getattr(hvd, name)).parameters.values())
    want = parse(HOROVOD_SIGNATURES[name])
    got = [(p.name, NO_DEFAULT if p.default is inspect.Parameter.empty else p.default) for p in params[:len(want)]]
    assert got == want
    assert all(p.default is not inspect.Parameter.empty for p in params[len(want):])  # extras are optional


def test_sync_batch_norm_signature():
    params = inspect.signature(hvd.SyncBatchNorm).parameters
    assert [(k, p.default) for k, p in params.items()][:5] == [
        ("num_features", inspect.Parameter.empty), ("eps", 1e-5), ("momentum", 0.1), ("affine", True),
        ("track_running_stats", True)]


# --- return values ---------------------------------------------------------------------------

def test_async_forms_return_handles_and_synchronize_returns_outputs():
    t = torch.ones(4)
    handle = hvd.allreduce_async(t, op=hvd.Sum)
    assert isinstance(handle, int) and isinstance(hvd.poll(handle), bool)
    out = hvd.synchronize(handle)
    assert torch.is_tensor(out) and out is not t
    assert hvd.synchronize(handle) is None  # Horovod: a handle no longer in flight gives None
    with pytest.raises(ValueError):
        hvd.poll(handle)
    assert hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Sum)) is t
    assert hvd.synchronize(hvd.broadcast_async_(t, 0)) is t
    assert hvd.allreduce_(t) is t and hvd.broadcast_(t, 0) is t
    grouped = hvd.synchronize(hvd.grouped_allreduce_async([torch.ones(2), torch.ones(3)]))
    assert isinstance(grouped, list) and [g.shape[0] for g in grouped] == [2, 3]
    tensors = [torch.ones(2), torch.ones(3)]
    assert all(a is b for a, b in zip(hvd.grouped_allreduce_(tensors), tensors))
    assert isinstance(hvd.grouped_allgather([torch.ones(1)]), list)
    assert isinstance(hvd.synchronize(hvd.grouped_allgather_async([torch.ones(1)])), list)
    assert isinstance(hvd.grouped_reducescatter([torch.ones(hvd.size())]), list)
    assert isinstance(hvd.synchronize(hvd.grouped_reducescatter_async([torch.ones(hvd.size())])), list)
    assert torch.is_tensor(hvd.synchronize(hvd.reducescatter_async(torch.ones(hvd.size()))))


def test_alltoall_returns_received_splits_when_given_splits():
    n, r = hvd.size(), hvd.rank()
    even = torch.arange(2.0 * n) + 100 * r
    assert torch.is_tensor(hvd.alltoall(even))  # no splits: the output alone
    out, received = hvd.synchronize(hvd.alltoall_async(even))  # the async form: always both
    assert received.dtype == torch.int32 and received.tolist() == [2] * n
    np.testing.assert_array_equal(out.numpy(), np.concatenate([np.arange(2 * r, 2 * r + 2) + 100 * s
                                                               for s in range(n)]))
    for splits in ([1] * n, torch.ones(n, dtype=torch.int32)):
        # Rows beyond the splits' sum are not sent (Horovod allows a sum below the first dimension).
        out, received = hvd.alltoall(torch.arange(n + 2.0) + 100 * r, splits)
        assert received.dtype == torch.int32 and received.tolist() == [1] * n
        np.testing.assert_array_equal(out.numpy(), np.array([r + 100.0 * s for s in range(n)]))


def test_the_other_calls_return_what_horovod_returns():
    n, r = hvd.size(), hvd.rank()
    assert hvd.init() is None and hvd.is_initialized() is True
    assert hvd.barrier() is None
    assert hvd.broadcast_object({"r": r}, root_rank=0) == {"r": 0}
    assert hvd.allgather_object(r) == list(range(n))
    assert callable(hvd.sparse_allreduce_async(torch.ones(2).to_sparse(), "api.sparse", hvd.Sum))
    assert isinstance(hvd.nccl_built(), int) and hvd.mpi_built() is False
    model = torch.nn.Linear(2, 1)
    assert isinstance(hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1)), torch.optim.SGD)


def test_broadcast_optimizer_state_gives_fresh_parameters_zero_gradients():
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    weight = torch.nn.Parameter(torch.full((3,), float(hvd.rank())))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([frozen, weight], lr=0.1, momentum=0.9),
                                   named_parameters=[("frozen", frozen), ("weight", weight)])
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert frozen.grad is None
    np.testing.assert_array_equal(weight.grad.numpy(), np.zeros(3))
    embedding = torch.nn.Embedding(4, 2, sparse=True)
    sparse_opt = torch.optim.SGD(embedding.parameters(), lr=0.1)
    hvd.broadcast_optimizer_state(sparse_opt, root_rank=0, model=embedding)
    assert embedding.weight.grad.is_sparse


def test_join_returns_the_last_rank_as_an_int():
    last = hvd.join()
    assert isinstance(last, int) and 0 <= last < hvd.size()


# --- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("splits", ["too many", "float", "int64", "2-D", "sum too large", "negative"])
def test_alltoall_rejects_bad_splits_with_value_error(splits):
    n = hvd.size()
    bad = {"too many": [1] * (n + 1), "float": torch.ones(n, dtype=torch.float32),
           "int64": torch.ones(n, dtype=torch.int64), "2-D": torch.ones(n, 1, dtype=torch.int32),
           "sum too large": [2] * n, "negative": [-1] + [1] * (n - 1)}[splits]
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(n), bad)


def test_alltoall_without_splits_needs_a_multiple_of_the_size():
    if hvd.size() < 2:
        pytest.skip("every length is a multiple of 1")
    with pytest.raises(ValueError):
        hvd.alltoall(torch.ones(hvd.size() + 1))


def test_alltoall_shapes_or_types_that_differ_fail_on_every_rank():
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        pytest.skip("needs 2 ranks")
    with pytest.raises(hvd.HorovodInternalError):
        hvd.alltoall(torch.ones(2 * n, 10 * (r + 1)))
    with pytest.raises(hvd.HorovodInternalError):
        hvd.alltoall(torch.ones(n, dtype=torch.int32 if r % 2 else torch.float32))


def test_reducescatter_of_a_scalar_fails_on_every_rank():
    with pytest.raises(hvd.HorovodInternalError, match="scalar"):
        hvd.reducescatter(torch.tensor(float(hvd.rank())), op=hvd.Average)
    with pytest.raises(hvd.HorovodInternalError, match="scalar"):
        hvd.grouped_reducescatter([torch.zeros(3, 1), torch.tensor(1.0)])
    hvd.reducescatter(torch.ones(hvd.size()))  # and the job goes on


def test_adasum_refusals():
    """What horovod.torch refuses (non-global sets, non-power-of-two sizes) and what hora's engine
    refuses besides (integer tensors, reducescatter), alike on every rank."""
    t = torch.ones(3)
    with pytest.raises(hvd.HorovodInternalError, match="Adasum is an allreduce only"):
        hvd.reducescatter(torch.ones(hvd.size()), op=hvd.Adasum)
    n = hvd.size()
    if n & (n - 1):
        for call in (lambda: hvd.allreduce(t, op=hvd.Adasum), lambda: hvd.allreduce_async(t, op=hvd.Adasum),
                     lambda: hvd.allreduce_(t, op=hvd.Adasum), lambda: hvd.grouped_allreduce([t], op=hvd.Adasum),
                     lambda: hvd.grouped_allreduce_async_([t], op=hvd.Adasum)):
            with pytest.raises(NotImplementedError, match="non-power of 2 ranks"):
                call()
        with pytest.raises(NotImplementedError, match="non-power of 2 ranks"):
            hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1), op=hvd.Adasum)
    else:
        with pytest.raises(ValueError, match="floating-point tensors only"):
            hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum, name="adasum.int")


def test_op_and_average_together_are_refused():
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum)
    with pytest.warns(DeprecationWarning):
        hvd.allreduce(torch.ones(2), average=False)


def test_distributed_optimizer_argument_errors():
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), backward_passes_per_step=0)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)
    for groups in (-1, [[model.weight, model.weight]], [["not a tensor"]]):
        with pytest.raises(ValueError):
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), groups=groups)


def linear_optimizer(**kwargs):
    model = torch.nn.Linear(1, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), **kwargs)
    return model, opt


def test_step_after_synchronize_warns_unless_skipped():
    model, opt = linear_optimizer()
    for skip in (False, True):
        opt.zero_grad()
        model(torch.ones(1, 1)).sum().backward()
        opt.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if skip:
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()
        messages = [str(w.message) for w in caught]
        if skip:
            assert messages == []
        else:
            assert len(messages) == 1
            assert "optimizer.step() called without optimizer.skip_synchronize()" in messages[0]


def test_misuse_between_backward_and_step_raises_assertion_error():
    if hvd.size() < 2:
        pytest.skip("the hooks are installed only when there are other ranks")
    model, opt = linear_optimizer()
    model(torch.ones(1, 1)).sum().backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        model(torch.ones(1, 1)).sum().backward()
    opt.synchronize()  # the first pass's allreduces, still in flight
