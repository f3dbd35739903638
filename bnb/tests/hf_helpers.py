"""Shared by the Hugging Face end-to-end tests (test_hf_*.py, test_quantize_cli.py): the stack imported or the
module skipped saying why, and a small random-weight Llama saved as a local model directory (no hub, no network)."""

import os

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"  # everything is local: a hub request would be a bug, and fail offline
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

VOCAB = 512
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def import_stack():
    """transformers, peft and accelerate, with bnb behind the name bitsandbytes; the module is skipped, with the
    reason, where one of the three is not installed (tools/setup.sh installs tools/requirements-hf.txt)."""
    found = []
    for name in ("transformers", "peft", "accelerate"):
        found.append(pytest.importorskip(name, reason=f"{name} is not installed here (tools/requirements-hf.txt did "
                                                      "not install): the Hugging Face end-to-end tests skip"))
    import bitsandbytes  # the companion: a Bazel dep of these tests, so its absence is a failure, not a skip
    assert "+bnb" in bitsandbytes.__version__, f"bitsandbytes {bitsandbytes.__version__} is not bnb's companion"
    return found


def save_tiny_llama(directory, seed: int = 0):
    """A 2-layer Llama of hidden size 128 with random weights, saved with save_pretrained (safetensors, fp32)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=128, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(directory)
    return directory


def token_ids(batch: int = 2, length: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()
