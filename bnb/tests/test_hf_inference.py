"""transformers' bitsandbytes recipes for inference, run on bnb through the companion `bitsandbytes`:
from_pretrained with BitsAndBytesConfig (NF4 with nested statistics at bf16 and fp32 compute; LLM.int8()), greedy
generation, save_pretrained and reload, model.dequantize(). A small random Llama, saved locally."""

import pytest
import torch

from hf_helpers import cosine, import_stack, save_tiny_llama, token_ids

transformers, peft, accelerate = import_stack()

import bnb  # noqa: E402
from bnb import _C, cpu_layout  # noqa: E402
from bnb import functional as F  # noqa: E402
from helpers import assert_same_bits  # noqa: E402
from transformers import BitsAndBytesConfig, LlamaForCausalLM  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def reference_logits(model_dir):
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(token_ids()).logits.float()


def nf4(compute: torch.dtype) -> BitsAndBytesConfig:
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute)


def load_nf4(path, compute: torch.dtype):
    return LlamaForCausalLM.from_pretrained(path, dtype=compute, quantization_config=nf4(compute),
                                            device_map="cpu").eval()


def quantized_linears(model, cls):
    found = {name: m for name, m in model.named_modules() if isinstance(m, cls)}
    assert len(found) == 14, sorted(found)  # 7 projections x 2 layers; lm_head stays unquantized, as in bitsandbytes
    return found


def test_transformers_sees_bitsandbytes_available():
    from transformers.utils import is_bitsandbytes_available
    assert is_bitsandbytes_available()


@pytest.mark.parametrize("compute", [torch.float32, torch.bfloat16])
def test_nf4_logits_match_the_stored_weights_and_are_close_to_the_unquantized_model(model_dir, reference_logits,
                                                                                     compute):
    model = load_nf4(model_dir, compute)
    layers = quantized_linears(model, bnb.nn.Linear4bit)
    state = layers["model.layers.0.self_attn.q_proj"].weight.quant_state
    assert state.quant_type == "nf4" and state.nested and state.dtype == compute
    with torch.no_grad():
        logits = model(token_ids()).logits.float()

    # The same model in fp32 with each quantized weight replaced by its dequantized value: what the 4-bit model
    # computes, up to the compute dtype's rounding.
    dense = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, layer in layers.items():
            w = F.dequantize_4bit(layer.weight.data, layer.weight.quant_state).float()
            dense.get_submodule(name).weight.copy_(w)
        expected = dense(token_ids()).logits.float()
    same = cosine(logits, expected)
    # Measured: 1 - 1e-12 at fp32, 0.99998 at bf16 (activations rounded to bf16 at every layer).
    assert same > (0.999999 if compute == torch.float32 else 0.9998), same
    # NF4 of randn weights keeps ~0.99 of the logits' direction (measured 0.9913 at both compute dtypes).
    close = cosine(logits, reference_logits)
    assert 0.98 < close < 0.9999, close


def test_greedy_generation_is_deterministic_and_follows_the_logits(model_dir):
    model = load_nf4(model_dir, torch.float32)
    prompt = token_ids(1, 8)
    first = model.generate(prompt, max_new_tokens=8, do_sample=False)
    again = model.generate(prompt, max_new_tokens=8, do_sample=False)
    assert torch.equal(first, again)
    # Independently: argmax of the whole sequence's logits, recomputed each step without the KV cache.
    ids = prompt
    with torch.no_grad():
        for _ in range(8):
            nxt = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    assert torch.equal(first, ids), (first, ids)


def test_save_pretrained_and_reload_are_bit_exact(model_dir, tmp_path):
    model = load_nf4(model_dir, torch.bfloat16)
    stored = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():  # an eval forward first: on an AVX-512 CPU, Linear4bit repacks its weights in place
        model(token_ids())
    if _C.gemm4_packed_runs("bfloat16", 1):
        assert all(cpu_layout.layout_of(m.weight.quant_state) is not None
                   for m in quantized_linears(model, bnb.nn.Linear4bit).values())
    model.save_pretrained(tmp_path)
    reloaded = LlamaForCausalLM.from_pretrained(tmp_path, device_map="cpu").eval()  # its config says how
    assert isinstance(reloaded.model.layers[1].mlp.down_proj, bnb.nn.Linear4bit)
    saved, loaded = model.state_dict(), reloaded.state_dict()
    assert saved.keys() == loaded.keys() == stored.keys()
    assert any(k.endswith("quant_state.bitsandbytes__nf4") for k in saved), sorted(saved)[:20]
    for key in saved:  # bitsandbytes' bytes, as loaded, whatever layout the weights were in when saved
        assert_same_bits(loaded[key], saved[key])
        assert_same_bits(saved[key], stored[key])
    with torch.no_grad():
        assert_same_bits(reloaded(token_ids()).logits, model(token_ids()).logits)


def test_dequantize_gives_the_dequantized_stored_weights_exactly(model_dir):
    model = load_nf4(model_dir, torch.float32)
    with torch.no_grad():
        model(token_ids())  # an eval forward first: bitsandbytes' CPU path changed the weights it dequantized after one
    expected = {name: F.dequantize_4bit(m.weight.data, m.weight.quant_state)
                for name, m in quantized_linears(model, bnb.nn.Linear4bit).items()}
    model.dequantize()
    for name, weight in expected.items():
        layer = model.get_submodule(name)
        assert type(layer) is torch.nn.Linear, (name, type(layer))
        assert_same_bits(layer.weight.data, weight)


def test_load_in_8bit_logits_are_close_to_the_unquantized_model(model_dir, reference_logits):
    config = BitsAndBytesConfig(load_in_8bit=True)
    model = LlamaForCausalLM.from_pretrained(model_dir, quantization_config=config, device_map="cpu").eval()
    layers = quantized_linears(model, bnb.nn.Linear8bitLt)
    weight = layers["model.layers.0.mlp.up_proj"].weight
    assert weight.dtype == torch.int8 and weight.SCB.shape == (weight.shape[0],)
    with torch.no_grad():
        logits = model(token_ids()).logits.float()
    close = cosine(logits, reference_logits)
    assert 0.999 < close < 1 - 1e-7, close  # measured 0.99990: int8 rows keep more than NF4
