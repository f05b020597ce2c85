"""Gradient sizes (float32 elements per tensor) of the model whose step is predicted: given as a
list, or read from a real PyTorch model (every parameter that requires a gradient)."""

import importlib.util
import os

# The models of benchmarks/training/train_bench.py: (file in the source tree, function, arguments).
PRESETS = {"cnn": ("examples/pytorch/fashion_mnist.py", "small_cnn", ()),
           "wrn": ("examples/pytorch/fashion_mnist.py", "wide_resnet", (10,))}


def source_root():
    """The hora source tree this package runs from (python/hora/cost_model -> the root)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def torch_gradient_sizes(path, function, args=()):
    """Element counts of the parameters of the model that `function(*args)` in the file builds."""
    import torch  # noqa: F401  (the model's file imports it; a clear error here if it is missing)
    spec = importlib.util.spec_from_file_location("cost_model_target", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = getattr(module, function)(*args)
    return [p.numel() for p in model.parameters() if p.requires_grad]


def gradient_sizes(model):
    """A preset name (PRESETS) or FILE.py:FUNCTION: the model's tensors' element counts."""
    if model in PRESETS:
        relative, function, args = PRESETS[model]
        # The tree this package runs from, or (an installed package) the tree one runs it in.
        places = [os.path.join(root, relative) for root in (source_root(), os.getcwd())]
        path = next((p for p in places if os.path.isfile(p)), None)
        if path is None:
            raise ValueError(f"preset {model!r} reads {relative} of hora's source tree, not found at "
                             f"{' or '.join(places)}; pass --model FILE.py:FUNCTION or --sizes")
        return torch_gradient_sizes(path, function, args)
    path, _, function = model.rpartition(":")
    if not path or not os.path.isfile(path):
        raise ValueError(f"--model takes {', '.join(PRESETS)} or FILE.py:FUNCTION, got {model!r}")
    return torch_gradient_sizes(path, function)
