"""bitsandbytes' packing of non-tensor quantization state into a uint8 tensor (UTF-8 JSON), for state dicts."""

import json
from typing import Any

import torch


def pack_dict_to_tensor(source: dict[str, Any]) -> torch.Tensor:
    return torch.tensor(list(json.dumps(source).encode("utf-8")), dtype=torch.uint8)


def unpack_tensor_to_dict(packed: torch.Tensor) -> dict[str, Any]:
    """The dict packed into `packed`; ValueError, saying why, for anything but uint8 bytes of UTF-8 JSON of an object
    (a loader reports it, rather than fail later on another kind of value)."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.device.type == "meta":
        what = (f"a {str(packed.dtype).removeprefix('torch.')} tensor on {packed.device}"
                if isinstance(packed, torch.Tensor) else type(packed).__name__)
        raise ValueError(f"expected the bytes of UTF-8 JSON as a uint8 tensor, got {what}")
    try:
        value = json.loads(bytes(packed.reshape(-1).cpu().tolist()).decode("utf-8"))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"not UTF-8 JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__} {json.dumps(value)[:80]}")
    return value
