"""QuantState: what dequantization needs besides the codes, with bitsandbytes' fields and state-dict keys."""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ._state_dict import pack_dict_to_tensor, unpack_tensor_to_dict


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class QuantState:
    """Quantization state: absmax per block, codebook, blocksize, original dtype and shape, and for nested
    ("double") quantization the offset and the state of the quantized absmax (state2)."""

    valid_quant_types = ("fp4", "nf4")
    valid_qs_type_keys = [f"bitsandbytes__{x}" for x in valid_quant_types]
    valid_qs_keys = [
        "absmax", "quant_map", "nested_absmax", "nested_quant_map", "quant_state", "quant_type", "blocksize",
        "dtype", "shape", "nested_blocksize", "nested_dtype", "nested_offset",
    ]

    def __init__(self, absmax, shape=None, code=None, blocksize=None, quant_type=None, dtype=None, offset=None,
                 state2=None):
        self.absmax = absmax
        self.shape = shape
        self.code = code
        self.dtype = dtype
        self.blocksize = blocksize
        self.quant_type = quant_type
        self.offset = offset
        self.state2 = state2
        self.nested = state2 is not None

    def __getattr__(self, name: str) -> Any:
        # FSDP resolves the packed key "quant_state.bitsandbytes__nf4" with getattr on this object.
        if name.startswith("bitsandbytes__") and self.__dict__.get("quant_type") is not None:
            packed = self.as_dict(packed=True)
            if "quant_state." + name in packed:
                return packed["quant_state." + name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __getitem__(self, idx: int) -> Any:
        """The older list layout: [absmax, shape, dtype, blocksize, [offset, state2] or None, quant_type]."""
        nested = [self.offset, self.state2] if self.nested else None
        return [self.absmax, self.shape, self.dtype, self.blocksize, nested, self.quant_type][idx]

    @classmethod
    def from_dict(cls, qs_dict: dict[str, Any], device: torch.device) -> "QuantState":
        """Rebuilds a state from as_dict()'s output, packed or not. A packed dict's keys may carry a prefix
        ("weight.absmax", as a state dict holds them); an unpacked one's are as_dict() gives them (as bitsandbytes')."""
        qs_dict = dict(qs_dict)
        qs_key = [k for k, v in qs_dict.items() if "quant_state" in k and isinstance(v, torch.Tensor)]
        if "quant_type" not in qs_dict:
            if not qs_key:
                raise ValueError("QuantState.from_dict: expected packed or unpacked quant_state items, found neither")
            if len(qs_key) != 1 or qs_key[0].split(".")[-1] not in cls.valid_qs_type_keys:
                raise ValueError(f"QuantState.from_dict: expected exactly one `quant_state` item ending in one of "
                                 f"{cls.valid_qs_type_keys}, found {qs_key}")
        if len(qs_key) == 1:
            qs_dict.update(unpack_tensor_to_dict(qs_dict.pop(qs_key[0])))
        qs_dict = {k.split(".")[-1]: v for k, v in qs_dict.items()}
        unknown = set(qs_dict) - set(cls.valid_qs_keys)
        if unknown:
            raise ValueError(f"QuantState.from_dict: unknown keys {sorted(unknown)}; expected a subset of "
                             f"{cls.valid_qs_keys}")
        offset = state2 = None
        if "nested_absmax" in qs_dict:
            offset = torch.tensor(float(qs_dict["nested_offset"])).to(device)
            state2 = cls(absmax=qs_dict["nested_absmax"].to(device), blocksize=qs_dict["nested_blocksize"],
                         code=qs_dict["nested_quant_map"].to(device), dtype=getattr(torch, qs_dict["nested_dtype"]))
        shape = qs_dict.get("shape")
        return cls(quant_type=qs_dict["quant_type"], absmax=qs_dict["absmax"].to(device),
                   blocksize=qs_dict["blocksize"], code=qs_dict["quant_map"].to(device),
                   dtype=getattr(torch, qs_dict["dtype"]), shape=torch.Size(shape) if shape is not None else None,
                   offset=offset, state2=state2)

    @classmethod
    def packed_keys_check(cls, qs_dict: dict[str, Any], quant_type: str) -> tuple[list[str], list[str]]:
        """For the items of a packed 4-bit state (as_dict(packed=True)'s keys, without a prefix): the keys a complete
        state would add, and the keys no packed state has, as (missing, unexpected). A state whose metadata says
        it is nested misses nested_absmax and nested_quant_map without them. `quant_type` names the metadata key
        when that is what is missing. Raises ValueError when the metadata is not UTF-8 JSON."""
        tensors = ("absmax", "quant_map", "nested_absmax", "nested_quant_map")
        packed = [k for k in qs_dict if k.startswith("quant_state.") and k[len("quant_state."):]
                  in cls.valid_qs_type_keys]
        unexpected = [k for k in qs_dict if k not in tensors and k not in packed]
        missing = [k for k in ("absmax", "quant_map") if k not in qs_dict]
        if not packed:
            missing.append(f"quant_state.bitsandbytes__{quant_type}")
        elif any(k.startswith("nested_") for k in unpack_tensor_to_dict(qs_dict[packed[0]])):
            missing += [k for k in ("nested_absmax", "nested_quant_map") if k not in qs_dict]
        return missing, unexpected

    def size_problems_4bit(self, packed: torch.Tensor) -> list[tuple[str, str]]:
        """Whether `packed` and this 4-bit state's tensors have the sizes its shape and blocksizes call for, as
        (state-dict key suffix, "" for the packed codes themselves; what is wrong) pairs, empty when all fit: a
        truncated checkpoint is then refused on load rather than failing, or running, at some later forward."""
        n = math.prod(self.shape)
        blocks = -(-n // self.blocksize)
        want = [("", "packed codes (bytes)", packed.numel() * packed.element_size(), (n + 1) // 2),
                ("quant_map", "code values", self.code.numel(), 16)]
        if self.nested:
            want += [("absmax", "8-bit absmax codes", self.absmax.numel(), blocks),
                     ("nested_absmax", "absmax scales", self.state2.absmax.numel(),
                      -(-blocks // self.state2.blocksize)),
                     ("nested_quant_map", "code values", self.state2.code.numel(), 256)]
        else:
            want.append(("absmax", "absmax values", self.absmax.numel(), blocks))
        return [(key, f"holds {got} {what}, the shape {list(self.shape)} with blocksize {self.blocksize} needs {need}")
                for key, what, got, need in want if got != need]

    def as_dict(self, packed: bool = False) -> dict[str, Any]:
        """Tensors and plain values for a state dict. packed=True (4-bit states) folds the non-tensor values into
        one uint8 tensor under "quant_state.bitsandbytes__<quant_type>", so safetensors can hold them; an 8-bit
        state has no quant_type to name that key and, as in bitsandbytes 0.50, returns the plain dict."""
        qs_dict: dict[str, Any] = {
            "quant_type": self.quant_type,
            "absmax": self.absmax,
            "blocksize": self.blocksize,
            "quant_map": self.code,
            "dtype": _dtype_name(self.dtype),
            "shape": tuple(self.shape) if self.shape is not None else None,
        }
        if self.nested:
            qs_dict.update({
                "nested_absmax": self.state2.absmax,
                "nested_blocksize": self.state2.blocksize,
                "nested_quant_map": self.state2.code.clone(),  # unshared, so safetensors keeps it
                "nested_dtype": _dtype_name(self.state2.dtype),
                "nested_offset": self.offset.item(),
            })
        if not packed or self.quant_type is None:
            return qs_dict
        out = {k: v for k, v in qs_dict.items() if isinstance(v, torch.Tensor)}
        plain = {k: v for k, v in qs_dict.items() if not isinstance(v, torch.Tensor)}
        out["quant_state.bitsandbytes__" + self.quant_type] = pack_dict_to_tensor(plain)
        return out

    def to(self, device) -> None:
        self.code = self.code.to(device)
        self.absmax = self.absmax.to(device)
        if self.nested:
            self.offset = self.offset.to(device)
            self.state2.absmax = self.state2.absmax.to(device)
            self.state2.code = self.state2.code.to(device)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantState):
            return False

        def same(a: Optional[Any], b: Optional[Any]) -> bool:
            return a == b if a is not None and b is not None else a is b

        return (torch.allclose(self.absmax, other.absmax, atol=1e-6) and self.shape == other.shape
                and torch.allclose(self.code, other.code, atol=1e-6) and self.dtype == other.dtype
                and self.blocksize == other.blocksize and self.quant_type == other.quant_type
                and same(self.offset, other.offset) and same(self.state2, other.state2))
