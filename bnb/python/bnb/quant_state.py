"""QuantState: what dequantization needs besides the codes, with bitsandbytes' fields and state-dict keys."""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ._state_dict import pack_dict_to_tensor, unpack_tensor_to_dict


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


_FLOAT_NAMES = ("float32", "float16", "bfloat16")  # the dtypes dequantization writes
_STORAGES = (torch.uint8, torch.bfloat16, torch.float16, torch.float32)  # packed codes' (the ops' quant_storage)
_TENSOR_FIELDS = ("absmax", "quant_map", "nested_absmax", "nested_quant_map")
_NESTED_FIELDS = ("nested_absmax", "nested_blocksize", "nested_quant_map", "nested_dtype", "nested_offset")


def _field_problems(f: dict[str, Any], names: dict[str, str], device) -> list[tuple[str, str]]:
    """What is wrong with each field of a state's dict (prefixes stripped, metadata unpacked), as (name, what)
    pairs: the types and values every kernel takes, so that a state that loads dequantizes the same on every path
    (loaded onto `device`).
    A 4-bit state's quant_map must be its quant_type's table: the kernels other than gemv_4bit read the table
    by quant_type, so any other map would make results depend on which kernel a batch size picks."""
    from .functional import _BLOCKSIZES, get_4bit_type  # functional imports this module

    out: list[tuple[str, str]] = []

    def bad(k: str, what: str) -> None:
        out.append((names.get(k, k), what))

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def check_tensor(k: str, dtype: torch.dtype, numel: Optional[int] = None) -> bool:
        """Whether f[k] is a tensor of `dtype` (and numel) whose values can be read (not on meta)."""
        v = f[k]
        if not isinstance(v, torch.Tensor):
            bad(k, f"expected a tensor, got {type(v).__name__}")
        elif v.dtype != dtype:
            bad(k, f"expected {_dtype_name(dtype)}, got {_dtype_name(v.dtype)}")
        elif numel is not None and v.numel() != numel:
            bad(k, f"expected {numel} values, got {v.numel()} (shape {list(v.shape)})")
        elif v.device.type == "meta" and torch.device(device).type != "meta":
            bad(k, f"a meta tensor has no values to load onto {device}")
        else:
            return v.device.type != "meta"
        return False

    nested = any(k in f for k in _NESTED_FIELDS)
    required = ["quant_type", "absmax", "blocksize", "quant_map", "dtype", "shape"]
    required += list(_NESTED_FIELDS) if nested else []
    missing = [k for k in required if k not in f]
    for k in missing:
        bad(k, "missing")
    if missing:
        return out
    quant_type = f["quant_type"]
    is4 = quant_type in ("nf4", "fp4")
    if quant_type is not None and not is4:
        bad("quant_type", f"expected 'nf4', 'fp4' or (an 8-bit state) None, got {quant_type!r}")
    for k in ("blocksize", "nested_blocksize") if nested else ("blocksize",):
        if not is_int(f[k]) or f[k] not in _BLOCKSIZES:
            bad(k, f"expected one of {_BLOCKSIZES}, got {f[k]!r}")
    if f["dtype"] not in _FLOAT_NAMES:
        bad("dtype", f"expected one of {_FLOAT_NAMES}, got {f['dtype']!r}")
    shape = f["shape"]
    if shape is None and is4:
        bad("shape", "a 4-bit state needs its weight's shape, got None")
    elif shape is not None and (not isinstance(shape, (list, tuple)) or not all(is_int(d) and d > 0 for d in shape)):
        bad("shape", f"expected a list of sizes > 0, got {shape!r}")
    check_tensor("absmax", torch.uint8 if nested else torch.float32)
    if is4 and check_tensor("quant_map", torch.float32, 16):
        table = get_4bit_type(quant_type)
        if not torch.equal(f["quant_map"].detach().reshape(-1).cpu(), table):  # by value: bitsandbytes' FP4 has +0.0
            bad("quant_map", f"expected {quant_type}'s 16 values {table.tolist()}, got "
                             f"{f['quant_map'].reshape(-1).tolist()}")
    elif quant_type is None and check_tensor("quant_map", torch.float32, 256):
        if not bool(f["quant_map"].isfinite().all()):
            bad("quant_map", "every code value must be finite (the 8-bit kernels refuse others)")
    if nested:
        check_tensor("nested_absmax", torch.float32)
        if check_tensor("nested_quant_map", torch.float32, 256) and not bool(f["nested_quant_map"].isfinite().all()):
            bad("nested_quant_map", "every code value must be finite (the 8-bit kernels refuse others)")
        if f["nested_dtype"] != "float32":
            bad("nested_dtype", f"expected 'float32' (absmax values are float32), got {f['nested_dtype']!r}")
        v = f["nested_offset"]
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)):
            bad("nested_offset", f"expected a finite number, got {v!r}")
    return out


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
        ("weight.absmax", as a state dict holds them); an unpacked one's are as_dict() gives them (as bitsandbytes').
        Every field is checked (see checked_from_dict); a dict with any problem raises ValueError naming them all."""
        state, problems = cls.checked_from_dict(qs_dict, device)
        if problems:
            raise ValueError("QuantState.from_dict: " + "; ".join(f"{key}: {what}" for key, what in problems))
        return state

    @classmethod
    def checked_from_dict(cls, qs_dict: dict[str, Any],
                          device: torch.device) -> tuple[Optional["QuantState"], list[tuple[str, str]]]:
        """from_dict's work: (the state, []) or (None, the problems as (key, what is wrong) pairs). The keys are
        the dict's without a prefix; a field of the packed metadata is named as quant_state.bitsandbytes__<type>
        with the field, e.g. 'quant_state.bitsandbytes__nf4["blocksize"]'. Loaders report these where they report
        other errors (load_state_dict's error list), rather than let a bad checkpoint fail, or run wrong, later."""
        problems: list[tuple[str, str]] = []
        fields = {k.split(".")[-1]: v for k, v in qs_dict.items()}
        names = {k: k for k in fields}  # field -> how messages name it
        packed = [k for k, v in qs_dict.items() if "quant_state" in k and isinstance(v, torch.Tensor)]
        if "quant_type" not in qs_dict and len(packed) != 1:
            what = ("expected packed or unpacked quant_state items, found neither" if not packed else
                    f"expected exactly one `quant_state` item ending in one of {cls.valid_qs_type_keys}, "
                    f"found {packed}")
            return None, [("quant_state", what)]
        if len(packed) == 1:
            suffix = packed[0].split(".")[-1]
            key = "quant_state." + suffix
            del fields[suffix]
            try:
                meta = unpack_tensor_to_dict(qs_dict[packed[0]])
            except ValueError as e:
                return None, [(key, f"metadata unreadable: {e}")]
            names.update({k: f'{key}["{k}"]' for k in cls.valid_qs_keys if k not in _TENSOR_FIELDS})
            for k, v in meta.items():
                if k in _TENSOR_FIELDS:  # never metadata: it would stand in for the tensor
                    problems.append((f'{key}["{k}"]', "a tensor's key in the metadata"))
                    continue
                fields[k] = v
                names[k] = f'{key}["{k}"]'  # an unknown key, too
            if suffix not in cls.valid_qs_type_keys:
                problems.append((key, f"expected a key ending in one of {cls.valid_qs_type_keys}"))
            elif fields.get("quant_type") != suffix.removeprefix("bitsandbytes__"):
                problems.append((names["quant_type"] if "quant_type" in meta else key,
                                 f"is {meta.get('quant_type')!r}, but the key names "
                                 f"{suffix.removeprefix('bitsandbytes__')!r}"))
                fields["quant_type"] = suffix.removeprefix("bitsandbytes__")  # checks the rest as the key says
        unknown = sorted(set(fields) - set(cls.valid_qs_keys))
        if unknown:
            problems.append((", ".join(names[k] for k in unknown),
                             f"unknown keys; expected a subset of {cls.valid_qs_keys}"))
        problems += _field_problems(fields, names, device)
        if problems:
            return None, problems
        offset = state2 = None
        if "nested_absmax" in fields:
            offset = torch.tensor(float(fields["nested_offset"])).to(device)
            state2 = cls(absmax=fields["nested_absmax"].to(device), blocksize=fields["nested_blocksize"],
                         code=fields["nested_quant_map"].to(device), dtype=getattr(torch, fields["nested_dtype"]))
        shape = fields["shape"]
        return cls(quant_type=fields["quant_type"], absmax=fields["absmax"].to(device),
                   blocksize=fields["blocksize"], code=fields["quant_map"].to(device),
                   dtype=getattr(torch, fields["dtype"]), shape=torch.Size(shape) if shape is not None else None,
                   offset=offset, state2=state2), []

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
        if packed.dtype not in _STORAGES:
            return [("", f"holds {_dtype_name(packed.dtype)} values; packed codes are stored as one of "
                         f"{[_dtype_name(t) for t in _STORAGES]}")]
        # The code tables' sizes are from_dict's to check: they do not depend on the shape.
        want = [("", "packed codes (bytes)", packed.numel() * packed.element_size(), (n + 1) // 2)]
        if self.nested:
            want += [("absmax", "8-bit absmax codes", self.absmax.numel(), blocks),
                     ("nested_absmax", "absmax scales", self.state2.absmax.numel(),
                      -(-blocks // self.state2.blocksize))]
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
