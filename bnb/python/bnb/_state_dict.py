"""bitsandbytes' packing of non-tensor quantization state into a uint8 tensor (UTF-8 JSON), for state dicts."""

import json
from typing import Any

import torch


def pack_dict_to_tensor(source: dict[str, Any]) -> torch.Tensor:
    return torch.tensor(list(json.dumps(source).encode("utf-8")), dtype=torch.uint8)


def unpack_tensor_to_dict(packed: torch.Tensor) -> dict[str, Any]:
    return json.loads(bytes(packed.cpu().tolist()).decode("utf-8"))
