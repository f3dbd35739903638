"""bitsandbytes.utils' helpers that its modules and users reach for: the outlier tracer behind OutlierAwareLinear,
find_outlier_dims, replace_linear, the state-dict packing of quantization metadata and the names of the int8 weight
formats."""

from __future__ import annotations

import logging
import shlex
import subprocess

import torch

from ._state_dict import pack_dict_to_tensor, unpack_tensor_to_dict

__all__ = ["OutlierTracer", "find_outlier_dims", "outlier_hook", "replace_linear", "pack_dict_to_tensor",
           "unpack_tensor_to_dict", "LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING", "INVERSE_LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING",
           "execute_and_return", "sync_gpu", "empty_cpu_output_cache", "cpu_output_cache_info"]

logger = logging.getLogger(__name__)

# Linear8bitLt's `weight_format` state-dict entry. bitsandbytes 0.45+ and bnb write and read "row" (0) only; the
# others were GPU tile layouts of older releases.
LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING = {"row": 0, "col32": 1, "col_turing": 2, "col_ampere": 3}
INVERSE_LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING = {v: k for k, v in LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING.items()}


def find_outlier_dims(weight: torch.Tensor, reduction_dim: int = 0, zscore: float = 4.0, topk=None,
                      rdm: bool = False) -> torch.Tensor:
    """Indices of the dimensions whose standard deviation (over `reduction_dim`) has a z-score above `zscore` among
    all of them; or the `topk` largest; or (rdm) `topk` random ones."""
    if rdm:
        return torch.randint(0, weight.shape[1], size=(topk,), device=weight.device).long()
    std = weight.std(reduction_dim)
    if topk is not None:
        return torch.topk(std.abs(), k=topk, dim=0).indices
    return torch.where((std - std.mean()) / std.std() > zscore)[0]


def outlier_hook(module: torch.nn.Module, inputs) -> None:
    """Forward pre-hook of OutlierTracer: the outlier dimensions of a Linear's input, from the columns of its weight
    whose spread stands out, or for the first Linear from its input (z-score of the hidden dimensions' std, and
    |x| > 6)."""
    if not isinstance(module, torch.nn.Linear):
        raise TypeError(f"outlier_hook: expected a torch.nn.Linear, got {type(module).__name__}")
    tracer = OutlierTracer.get_instance()
    key = tracer.get_hvalue(module.weight)
    if key in tracer.hvalue2outlier_idx:  # every layer seen: the hooks are done
        for hook in tracer.hooks:
            hook.remove()
        return
    tracer.outliers.append(find_outlier_dims(module.weight))  # input columns of unusual spread in this weight
    tracer.hvalues.append(key)
    if len(tracer.outliers) > 1:  # after the first layer, the weight's own say which inputs are outliers
        tracer.hvalue2outlier_idx[key] = tracer.outliers[-1]
        return
    x = inputs[0]
    merged = x.reshape(-1, x.shape[-1])
    by_std = find_outlier_dims(merged, reduction_dim=1, zscore=3)
    by_size = torch.where((x.abs() > 6).reshape(-1, x.shape[-1]).any(dim=0))[0]
    tracer.hvalue2outlier_idx[key] = torch.cat([by_std, by_size]).unique()


class OutlierTracer:
    """Finds each Linear's outlier input dimensions in one forward pass of a model (initialize(model) hooks every
    Linear); OutlierAwareLinear asks it for its own with get_outliers(weight)."""

    _instance = None

    def __init__(self):
        raise RuntimeError("Call get_instance() instead")

    def initialize(self, model: torch.nn.Module) -> None:
        self.last_w = None
        self.current_outlier_dims = None
        self.hvalues = []
        self.outliers = []
        self.hvalue2outlier_idx = {}
        self.initialized = True
        self.hooks = [m.register_forward_pre_hook(outlier_hook) for m in model.modules()
                      if isinstance(m, torch.nn.Linear)]

    def is_initialized(self) -> bool:
        return getattr(self, "initialized", False)

    def get_hvalue(self, weight: torch.Tensor) -> int:
        """A weight's key: its storage's address."""
        return weight.data.untyped_storage().data_ptr()

    def get_outliers(self, weight: torch.Tensor):
        if not self.is_initialized():
            logger.warning("Outlier tracer is not initialized...")
            return None
        return self.hvalue2outlier_idx.get(self.get_hvalue(weight))

    @classmethod
    def get_instance(cls) -> "OutlierTracer":
        if cls._instance is None:
            cls._instance = cls.__new__(cls)
        return cls._instance


def replace_linear(model: torch.nn.Module, linear_replacement, skip_modules=("lm_head",), copy_weights: bool = False,
                   post_processing_function=None) -> torch.nn.Module:
    """Replaces every torch.nn.Linear of `model` (recursively; not those named in skip_modules) by
    linear_replacement(in_features, out_features, bias), copying the weight and bias when copy_weights; calls the
    replaced module's method named post_processing_function, where it has one."""
    for name, module in model.named_children():
        if len(list(module.children())) > 0:
            replace_linear(module, linear_replacement, skip_modules, copy_weights, post_processing_function)
        if isinstance(module, torch.nn.Linear) and name not in skip_modules:
            new = linear_replacement(module.in_features, module.out_features, module.bias is not None)
            if copy_weights:
                new.weight = module.weight
                new.bias = module.bias
            model._modules[name] = new
            func = getattr(module, post_processing_function, None) if post_processing_function else None
            if func is not None:
                func(module)
    return model


def execute_and_return(command_string: str) -> tuple[str, str]:
    """Runs a command (split as a shell would, but with no shell) and returns its stdout and stderr, decoded and
    stripped: bitsandbytes' diagnostics helper."""
    done = subprocess.run(shlex.split(command_string), capture_output=True)
    return done.stdout.decode("utf-8").strip(), done.stderr.decode("utf-8").strip()


def sync_gpu(t: torch.Tensor) -> None:
    """Waits for the work queued on t's device: CUDA or XPU; nothing for the CPU and other devices."""
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)
    elif t.device.type == "xpu":
        torch.xpu.synchronize(t.device)


def empty_cpu_output_cache() -> None:
    """Hands back to the system the memory that bnb's CPU output cache holds: large outputs (8 MB and up) that were
    freed and are kept for the next outputs to reuse (at most the knob cpu.output_cache_mb; a block unused for 10 s
    goes at the next such allocation or free anyway). Tensors still alive are untouched. Like
    torch.cuda.empty_cache() for bnb's CPU outputs."""
    from . import _C
    _C.release_output_cache()


def cpu_output_cache_info() -> dict:
    """bnb's CPU output cache: cached_bytes and cached_blocks held for reuse now; reuses (outputs served from it) and
    mappings (outputs that took fresh memory) since the process started."""
    from . import _C
    return _C.output_cache_stats()
