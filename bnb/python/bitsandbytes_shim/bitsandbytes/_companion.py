"""The one table of what the companion `bitsandbytes` forwards to bnb, and what it has nothing for.

Every name here is served by bnb's own object: `bitsandbytes.nn is bnb.nn`, `bitsandbytes.nn.Linear4bit is
bnb.nn.Linear4bit`, so an isinstance check or a patch through either name sees the same thing. The one exception is
bitsandbytes.optim (see _optim.py). This file's presence also marks a `bitsandbytes` package as the companion
(_conflict.py).
"""

from __future__ import annotations

import importlib
import importlib.util

# bitsandbytes.<name> -> the module serving it. Modules below these are bnb's of the same name
# (bitsandbytes.optim.adamw is bnb.optim.adamw, bitsandbytes.nn.modules8bit is bnb.nn.modules8bit).
SUBMODULES = {
    "nn": "bnb.nn",
    "nn.modules": "bnb.nn.modules",  # holds the 4-bit and the int8 modules, as bitsandbytes' does
    "nn.parametrize": "bnb.nn.parametrize",
    "functional": "bnb.functional",
    "utils": "bnb.utils",
    "autograd": "bnb.autograd",
    "optim": "bitsandbytes._optim",  # bnb.optim's optimizers under bitsandbytes' module name (_optim.py)
}

# Top-level names: bitsandbytes.<name> -> "module" or "module:attribute".
TOP_LEVEL = {
    "nn": "bnb.nn",
    "functional": "bnb.functional",
    "utils": "bnb.utils",
    "autograd": "bnb.autograd",
    "optim": "bitsandbytes.optim",
    "modules": "bnb.nn.modules",  # bitsandbytes imports nn.modules at the top level
    "matmul": "bnb:matmul",
    "matmul_4bit": "bnb:matmul_4bit",
    "MatmulLtState": "bnb:MatmulLtState",
    "features": "bnb:features",  # {"multi_backend"}: accelerate lets quantized models train on the CPU
    "supported_torch_devices": "bnb:supported_torch_devices",  # transformers checks the available devices against it
}

# Loaded on first use, as bnb does: bnb.optim imports torch.optim (and torch.profiler), which inference never needs.
LAZY = {"optim"}

# bitsandbytes 0.50's modules that bnb has nothing for: importing one, or reading it as an attribute, raises
# MissingFeatureError naming the feature.
MISSING_SUBMODULES = {
    "backends": "bitsandbytes' per-device kernel modules: bnb's kernels are torch ops (torch.ops.bnb.*), and "
                "out-of-tree ones load through bnb.backends",
    "cextension": "bitsandbytes' loader of its native library: bnb's kernels are in bnb._C",
    "cuda_specs": "bitsandbytes' CUDA library selection: bnb compiles its CUDA kernels with NVRTC at first use",
    "consts": "bitsandbytes' package constants",
    "diagnostics": "bitsandbytes' diagnostics (python -m bitsandbytes): python -m bnb info shows bnb's",
    "research": "bitsandbytes' research code (FP8 matmuls, SwitchBack)",
    "triton": "bitsandbytes' Triton kernels",
}

# Every name transformers 5.24, peft 0.21 and accelerate 1.15 use of bitsandbytes, found in their own source (by
# import, attribute, getattr/hasattr), and who uses it. test_shim.py scans the installed libraries and fails on a
# name missing here, and checks that each of these resolves.
USED_BY_HF = {
    "__version__": "transformers is_bitsandbytes_available (>= 0.46.1), accelerate is_bnb_available: through the "
                   "distribution's metadata",
    "supported_torch_devices": "transformers integrations/bitsandbytes.py validate_bnb_backend_availability",
    "features": "accelerate utils/imports.py is_bitsandbytes_multi_backend_available (CPU training)",
    "nn": "peft import_utils.py is_bnb_4bit_available",
    "nn.Linear4bit": "transformers replace_with_bnb_linear, quantizer_bnb_4bit; peft tuners; accelerate utils/bnb.py",
    "nn.Params4bit": "transformers Bnb4bitQuantize, num_parameters; peft merge (Bnb4bitBackend)",
    "nn.Params4bit.from_prequantized": "transformers Bnb4bitDeserialize (loading a 4-bit checkpoint)",
    "nn.Linear8bitLt": "transformers replace_with_bnb_linear, quantizer_bnb_8bit; peft tuners; accelerate",
    "nn.Int8Params": "transformers Bnb8bitQuantize / Bnb8bitDeserialize; peft merge (Bnb8bitBackend)",
    "functional": "transformers and peft dequantize_bnb_weight (hasattr checks)",
    "functional.dequantize_4bit": "transformers and peft dequantize_bnb_weight (dequantize, merge_and_unload)",
    "functional.int8_vectorwise_dequant": "transformers and peft dequantize_bnb_weight (int8)",
    "optim": "transformers Trainer, peft loraplus",
    "optim.AdamW": "transformers trainer_optimizer (adamw_bnb_8bit, paged_adamw_8bit, ...); accelerate deepspeed",
    "optim.AdamW32bit": "accelerate utils/deepspeed.py",
    "optim.Lion": "transformers trainer_optimizer (lion_8bit, paged_lion_32bit, ...); accelerate deepspeed",
    "optim.Lion32bit": "accelerate utils/deepspeed.py",
    "optim.RMSprop": "transformers trainer_optimizer (rmsprop_bnb, rmsprop_bnb_8bit, ...)",
    "optim.AdEMAMix": "transformers trainer_optimizer (ademamix, paged_ademamix_8bit, ...)",
    "optim.Adagrad": "accelerate utils/deepspeed.py",
    "optim.Adagrad32bit": "accelerate utils/deepspeed.py",
    "optim.GlobalOptimManager": "transformers Trainer (32-bit state for embeddings), peft loraplus",
    "optim.GlobalOptimManager.get_instance": "transformers Trainer, peft loraplus",
}


class MissingFeatureError(ImportError, NotImplementedError):
    """A bitsandbytes module or name that bnb has nothing for. Both an ImportError (code that probes an optional
    import goes on without it) and a NotImplementedError (what bnb raises for the features it lacks)."""


def missing(name: str) -> MissingFeatureError:
    return MissingFeatureError(f"bitsandbytes.{name} is not in bnb (the bitsandbytes companion forwards to bnb): "
                               f"{MISSING_SUBMODULES[name]}", name=f"bitsandbytes.{name}")


def version() -> str:
    """The companion's version: the bitsandbytes API it mirrors, and bnb's version as the local part."""
    import bnb
    return f"{bnb.__bitsandbytes_version__}+bnb.{bnb.__version__}"


def submodule_target(rest: str):
    """The module serving bitsandbytes.<rest>, None where there is none (the import fails as usual), or
    MissingFeatureError for a bitsandbytes module bnb lacks."""
    if rest in SUBMODULES:
        return SUBMODULES[rest]
    first = rest.split(".", 1)[0]
    if first in MISSING_SUBMODULES:
        raise missing(first)
    if first not in SUBMODULES:
        return None
    try:
        found = importlib.util.find_spec(f"bnb.{rest}")
    except ImportError:
        return None
    return f"bnb.{rest}" if found else None


def resolve_top_level(name: str):
    """The object bitsandbytes.<name> stands for; MissingFeatureError for a bitsandbytes module bnb lacks;
    AttributeError otherwise."""
    if name in MISSING_SUBMODULES:
        raise missing(name)
    if name not in TOP_LEVEL:
        raise AttributeError(f"module 'bitsandbytes' (bnb's companion) has no attribute {name!r}")
    module, _, attribute = TOP_LEVEL[name].partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


def resolve(dotted: str):
    """bitsandbytes.<dotted> by attribute lookups from the top level: "nn.Params4bit.from_prequantized"."""
    import bitsandbytes
    obj = bitsandbytes
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj
