"""bnb: k-bit quantization for PyTorch, with bitsandbytes' API.

`import bnb` loads the C++ library (which registers torch.ops.bnb.*), the pure-torch reference kernels, and then
the installed out-of-tree backends (bnb.backends: entry points of the group "bnb.backends"); it compiles nothing
and does not initialize CUDA.
"""

import torch  # noqa: F401  (bnb._C links libtorch: torch must be loaded first)

from . import _C  # registers the operators' schemas and C++ kernels
from . import autograd as _autograd
from . import reference as _reference
from . import backends, config, functional, jit, nn, utils
from .autograd import matmul_4bit
from .autograd_int8 import MatmulLtState, matmul
from .functional import QuantState

from ._version import __bitsandbytes_version__, __version__  # generated from version.bzl

# bitsandbytes' signals to the libraries that use it, with their meaning in bnb. accelerate lets a quantized model
# train on the CPU where "multi_backend" is a feature; transformers quantizes only where an available device is
# supported. The devices bnb has kernels of its own for; the reference kernels run bnb's ops on any other device too.
features = {"multi_backend"}
supported_torch_devices = {"cpu", "cuda"}

_reference.register()
_autograd.register()
config._warn_unknown_env_vars()
jit._locate_nvrtc()
backends.load_all()  # last: a backend's kernels go on top of bnb's own, and it may use all of bnb



def __getattr__(name: str):
    """bnb.optim on first use: it imports torch.optim (and through it torch.profiler), a sixth of import bnb's own
    time, which inference never needs. `import bnb.optim` works as usual."""
    if name == "optim":
        import importlib
        return importlib.import_module(".optim", __name__)
    raise AttributeError(f"module 'bnb' has no attribute {name!r}")


__all__ = ["backends", "config", "features", "functional", "jit", "matmul", "matmul_4bit", "MatmulLtState", "nn",
           "optim", "QuantState", "supported_torch_devices", "utils", "__version__", "__bitsandbytes_version__"]
