"""Every dtype horovod.torch takes on the CPU (and bfloat16, hora's own), in 1 to 3 dimensions,
through every collective, with Horovod's arithmetic for prescale, postscale and Average; and
the dtypes Horovod refuses everywhere (bool), refused with its exception type.

References are computed here with numpy from every rank's input (each rank can recompute any
rank's input from its seed). Scaling is Horovod's CPU arithmetic: an integer is multiplied by the
factor in double and truncated toward zero; float16, bfloat16 and float32 are multiplied in
float32 by the factor rounded to float32, then rounded to their type; Average is Sum with the
postscale factor divided by the number of ranks (in double, before the multiplication)."""

import numpy as np
import pytest
import torch

import hora.torch as hvd

# horovod.torch reduces none of uint8, int8 and int16 on the CPU; hora does (inputs stay small
# enough that no sum or product wraps).
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
REDUCTION_DTYPES = DTYPES
INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
DIMS = [1, 2, 3]


def shape_of(dim, rows=7):
    return (rows, 3, 2)[:dim]


def rank_values(seed, rank, shape, dtype, low=-40, high=40):
    """Rank `rank`'s input as float64 integers: exact in every dtype, and sums over a few ranks
    stay exact in bfloat16 (|x| <= 256)."""
    rs = np.random.RandomState(seed * 1000 + rank)
    if dtype == torch.int8:  # so that the sum over every rank cannot wrap (4 ranks x 40 would)
        bound = 127 // hvd.size() + 1
        low, high = max(low, -bound), min(high, bound)
    return rs.randint(0 if dtype == torch.uint8 else low, high, size=shape).astype(np.float64)


def as_tensor(values, dtype):
    """A tensor of its own (in-place collectives must not write into the reference's inputs)."""
    return torch.from_numpy(values.copy()).to(dtype)


def factor_for(seed):
    """A factor in (0, 1), the same on every rank, as Horovod's tests draw theirs."""
    return float(np.random.RandomState(seed).uniform(0.05, 1.0))


def round_to_bfloat16(f32):
    """float32 to bfloat16 (round to nearest even), back as float32."""
    bits = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def scaled(values, dtype, factor):
    """values * factor as Horovod scales a buffer of `dtype` on the CPU, as float64."""
    if factor == 1.0:
        return values
    if dtype in INTEGERS:
        return np.trunc(values * factor)
    if dtype == torch.float64:
        return values * factor
    product = values.astype(np.float32) * np.float32(factor)
    if dtype == torch.float16:
        return product.astype(np.float16).astype(np.float64)
    if dtype == torch.bfloat16:
        return round_to_bfloat16(product).astype(np.float64)
    return product.astype(np.float64)


def reference(inputs, dtype, op, prescale=1.0, postscale=1.0):
    """The reduction of every rank's input, with Horovod's scaling, as float64."""
    stack = np.stack([scaled(x, dtype, prescale) for x in inputs])
    if op in (hvd.Sum, hvd.Average):
        out = stack.sum(axis=0)
    elif op == hvd.Min:
        out = stack.min(axis=0)
    elif op == hvd.Max:
        out = stack.max(axis=0)
    else:
        out = stack.prod(axis=0)
    if op == hvd.Average and postscale == 1.0 and dtype in (torch.float32, torch.float64):
        # A plain mean of floats is the quotient rounded once (hora divides; Horovod multiplies
        # by 1/n rounded to float32, one unit in the last place off at 3 ranks and others).
        as_dtype = np.float32 if dtype == torch.float32 else np.float64
        return (out.astype(as_dtype) / as_dtype(len(inputs))).astype(np.float64)
    factor = postscale / len(inputs) if op == hvd.Average else postscale
    return scaled(out, dtype, factor)


def assert_matches(out, expected, dtype, exact=True):
    """`exact`: bit for bit (integers always are). Otherwise within a few roundings of the type
    (the ranks' scaled inputs are summed in an order the reference does not know)."""
    assert out.dtype == dtype and tuple(out.shape) == expected.shape
    got = out.to(torch.float64).numpy()
    if exact or dtype in INTEGERS:
        np.testing.assert_array_equal(got, expected)
    else:
        rtol, atol = {torch.float16: (4e-3, 0.1), torch.bfloat16: (3e-2, 1.0)}.get(dtype, (1e-6, 1e-4))
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def all_inputs(seed, dim, dtype, rows=7, **kwargs):
    return [rank_values(seed, r, shape_of(dim, rows), dtype, **kwargs) for r in range(hvd.size())]


def check_allreduce(seed, dtype, dim, op, prescale=1.0, postscale=1.0, exact=True, **kwargs):
    inputs = all_inputs(seed, dim, dtype, **kwargs)
    out = hvd.allreduce(as_tensor(inputs[hvd.rank()], dtype), op=op, prescale_factor=prescale,
                        postscale_factor=postscale)
    assert_matches(out, reference(inputs, dtype, op, prescale, postscale), dtype, exact)


# --- allreduce -------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_sum(dtype, dim):
    check_allreduce(1, dtype, dim, hvd.Sum)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_average(dtype, dim):
    # The sum of integer inputs is exact in every type; Average scales it once by 1/size.
    check_allreduce(2, dtype, dim, hvd.Average)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_min(dtype, dim):
    check_allreduce(3, dtype, dim, hvd.Min)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_max(dtype, dim):
    check_allreduce(4, dtype, dim, hvd.Max)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_product(dtype, dim):
    check_allreduce(5, dtype, dim, hvd.Product, low=-3, high=4)  # products stay exact


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_inplace(dtype, dim):
    inputs = all_inputs(6, dim, dtype)
    tensor = as_tensor(inputs[hvd.rank()], dtype)
    assert hvd.allreduce_(tensor, op=hvd.Sum) is tensor
    assert_matches(tensor, reference(inputs, dtype, hvd.Sum), dtype)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_prescale(dtype, dim):
    check_allreduce(7, dtype, dim, hvd.Sum, prescale=factor_for(7 + dim), exact=False)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_postscale(dtype, dim):
    # The sum of integer inputs is exact in every type, so one scaling: bit for bit.
    check_allreduce(8, dtype, dim, hvd.Sum, postscale=factor_for(8 + dim))


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_average_is_a_postscale(dtype, dim):
    # One multiplication by postscale / size: for integers, not a division and then a scaling.
    check_allreduce(9, dtype, dim, hvd.Average, postscale=3.0 * factor_for(9 + dim))


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_allreduce_average_with_prescale_and_postscale(dtype, dim):
    check_allreduce(10, dtype, dim, hvd.Average, prescale=factor_for(10), postscale=1.0 + factor_for(11 + dim),
                    exact=False)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
@pytest.mark.parametrize("inplace", [False, True], ids=["grouped_allreduce", "grouped_allreduce_"])
def test_grouped_allreduce_scaled(dtype, dim, inplace):
    pre, post = factor_for(12), 1.0 + factor_for(13 + dim)
    groups = [all_inputs(14 + i, dim, dtype, rows=3 + i) for i in range(3)]
    tensors = [as_tensor(g[hvd.rank()], dtype) for g in groups]
    if inplace:
        outs = hvd.grouped_allreduce_(tensors, op=hvd.Average, prescale_factor=pre, postscale_factor=post)
    else:
        outs = hvd.grouped_allreduce(tensors, op=hvd.Average, prescale_factor=pre, postscale_factor=post)
    for out, inputs in zip(outs, groups):
        assert_matches(out, reference(inputs, dtype, hvd.Average, pre, post), dtype, exact=False)


# --- reducescatter ---------------------------------------------------------------------------

def my_rows(expected):
    """This rank's block of dimension 0: as even as possible, earlier ranks taking the rest."""
    n, r, rows = hvd.size(), hvd.rank(), expected.shape[0]
    counts = [rows // n + (1 if d < rows % n else 0) for d in range(n)]
    start = sum(counts[:r])
    return expected[start:start + counts[r]]


def check_reducescatter(seed, dtype, dim, op, prescale=1.0, postscale=1.0, exact=True):
    inputs = all_inputs(seed, dim, dtype, rows=2 * hvd.size() + 1)
    out = hvd.reducescatter(as_tensor(inputs[hvd.rank()], dtype), op=op, prescale_factor=prescale,
                            postscale_factor=postscale)
    assert_matches(out, my_rows(reference(inputs, dtype, op, prescale, postscale)), dtype, exact)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_reducescatter_sum(dtype, dim):
    check_reducescatter(20, dtype, dim, hvd.Sum)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_reducescatter_average(dtype, dim):
    check_reducescatter(21, dtype, dim, hvd.Average)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_reducescatter_prescale(dtype, dim):
    check_reducescatter(22, dtype, dim, hvd.Sum, prescale=factor_for(22 + dim), exact=False)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_reducescatter_postscale(dtype, dim):
    check_reducescatter(23, dtype, dim, hvd.Sum, postscale=factor_for(23 + dim))


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", REDUCTION_DTYPES)
def test_reducescatter_average_with_scales(dtype, dim):
    check_reducescatter(24, dtype, dim, hvd.Average, prescale=factor_for(24), postscale=2.0 * factor_for(25 + dim),
                        exact=False)


# --- collectives that move data without arithmetic: every dtype ------------------------------

@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather(dtype, dim):
    # Rank r contributes r + 1 rows.
    inputs = [rank_values(30, r, shape_of(dim, r + 1), dtype) for r in range(hvd.size())]
    out = hvd.allgather(as_tensor(inputs[hvd.rank()], dtype))
    assert_matches(out, np.concatenate(inputs), dtype)
    grouped = hvd.grouped_allgather([as_tensor(inputs[hvd.rank()], dtype)] * 2)
    for g in grouped:
        assert_matches(g, np.concatenate(inputs), dtype)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(dtype, dim):
    inputs = all_inputs(31, dim, dtype)
    root = hvd.size() - 1
    assert_matches(hvd.broadcast(as_tensor(inputs[hvd.rank()], dtype), root), inputs[root], dtype)
    tensor = as_tensor(inputs[hvd.rank()], dtype)
    hvd.broadcast_(tensor, 0)
    assert_matches(tensor, inputs[0], dtype)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall(dtype, dim):
    # Even splits: rank s sends its rows [2d, 2d + 2) to rank d.
    n, r = hvd.size(), hvd.rank()
    inputs = all_inputs(32, dim, dtype, rows=2 * n)
    out = hvd.alltoall(as_tensor(inputs[r], dtype))
    assert_matches(out, np.concatenate([x[2 * r:2 * r + 2] for x in inputs]), dtype)


# --- what Horovod refuses --------------------------------------------------------------------

REDUCTIONS = {
    "allreduce": lambda t: hvd.allreduce(t, op=hvd.Sum),
    "allreduce_async": lambda t: hvd.allreduce_async(t, op=hvd.Sum),
    "allreduce_": lambda t: hvd.allreduce_(t, op=hvd.Sum),
    "grouped_allreduce": lambda t: hvd.grouped_allreduce([t], op=hvd.Sum),
    "reducescatter": lambda t: hvd.reducescatter(t, op=hvd.Sum),
}
MOVES = {
    "allgather": hvd.allgather,
    "grouped_allgather": lambda t: hvd.grouped_allgather([t]),
    "broadcast": lambda t: hvd.broadcast(t, 0),
    "broadcast_": lambda t: hvd.broadcast_(t, 0),
    "alltoall": hvd.alltoall,
}


@pytest.mark.parametrize("call", list(REDUCTIONS.values()), ids=list(REDUCTIONS))
@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_reductions_refuse_what_horovod_refuses(dtype, call):
    # Refused on the calling rank before anything is sent, so the ranks stay in step.
    with pytest.raises(ValueError, match=r"Tensor type .* is not supported"):
        call(torch.zeros(2 * hvd.size(), dtype=dtype))


@pytest.mark.parametrize("call", list(MOVES.values()), ids=list(MOVES))
@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_every_collective_refuses_bool(dtype, call):
    with pytest.raises(ValueError, match=r"Tensor type .* is not supported"):
        call(torch.zeros(2 * hvd.size(), dtype=dtype))


def test_refusal_names_the_collective_and_what_it_takes():
    with pytest.raises(ValueError) as info:
        hvd.allreduce(torch.zeros(2, dtype=torch.bool), op=hvd.Sum)
    message = str(info.value)
    assert "allreduce" in message and "torch.BoolTensor" in message and "torch.int16" in message
    assert "torch.bool" not in message.split("takes", 1)[1]
