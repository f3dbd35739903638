"""python -m bnb quantize: a local Hugging Face model directory (config.json and safetensors) to NF4, FP4 or
LLM.int8(), written as a checkpoint that transformers loads as it is (from_pretrained(out_dir), no
quantization_config needed).

The quantization runs through transformers' own bitsandbytes path (BitsAndBytesConfig), served by bnb through the
companion `bitsandbytes`: the checkpoint is exactly what transformers writes and reads, with transformers' choice
of which layers to quantize. Prints the checkpoint's bytes before and after and the cosine between the original's
output (logits, or the last hidden state of a model without a head) for a probe prompt and that of the written
checkpoint, reloaded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import shutil
import time
from pathlib import Path

import torch

from .progress import Progress

FORMATS = ("nf4", "fp4", "int8")
DTYPES = ("auto", "float32", "bfloat16", "float16")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json", ".bin.index.json")


class QuantizeError(ValueError):
    """A bad argument or input, or a missing piece of the environment: one line, exit status 2."""


def run_quantize(args) -> int:
    src, out = Path(args.model).resolve(), Path(args.output).resolve()
    _check_paths(src, out, args.force)
    transformers = _load_stack()
    started = time.perf_counter()

    config = transformers.AutoConfig.from_pretrained(src)
    model_class = _model_class(transformers, config)
    dtype = _model_dtype(config) if args.dtype == "auto" else getattr(torch, args.dtype)
    compute = dtype if args.compute_dtype == "auto" else getattr(torch, args.compute_dtype)
    quantization = _bnb_config(transformers, args, compute)
    print(f"bnb quantize: {src} ({model_class.__name__}, {dtype}) -> {out}")
    print(f"  format {_describe(args, compute)}")

    original = model_class.from_pretrained(src, dtype=dtype, device_map="cpu").eval()
    probe = _probe_inputs(transformers, src, config, args.probe)
    expected = _probe(original, probe)
    total = _count_linears(original, quantization)
    print(f"  {sum(p.numel() for p in original.parameters()) / 1e6:.1f}M parameters, {total} linear weights to "
          "quantize")
    del original

    bar = Progress("  quantizing", total, "weights")
    with _each_quantization(bar.advance):
        quantized = model_class.from_pretrained(src, dtype=dtype, device_map="cpu", quantization_config=quantization)
    bar.close()
    quantized.save_pretrained(out)
    copied = _copy_other_files(src, out)
    del quantized

    reloaded = model_class.from_pretrained(out, device_map="cpu").eval()
    got = _probe(reloaded, probe)
    cosine = torch.nn.functional.cosine_similarity(got.double().flatten(), expected.double().flatten(), dim=0).item()

    before, after = _checkpoint_bytes(src), _checkpoint_bytes(out)
    print(f"  checkpoint: {before / 1e6:.2f} MB before, {after / 1e6:.2f} MB after "
          f"({before / max(after, 1):.2f}x smaller; {before} -> {after} bytes)")
    print(f"  probe {probe['label']}: {probe['what']} cosine {cosine:.6f} (the written checkpoint reloaded, against "
          f"the original)")
    print(f"  wrote {out}" + (f" (and copied {', '.join(copied)})" if copied else "")
          + f" in {time.perf_counter() - started:.1f} s")
    return 0


def _check_paths(src: Path, out: Path, force: bool) -> None:
    if not (src / "config.json").is_file():
        raise QuantizeError(f"quantize: {src} has no config.json; expected a Hugging Face model directory "
                            "(config.json and *.safetensors)")
    if not any(src.glob("*.safetensors")):
        raise QuantizeError(f"quantize: {src} has no *.safetensors weights; expected a Hugging Face model "
                            "directory saved with safetensors (save_pretrained's default)")
    if out == src:
        raise QuantizeError(f"quantize: the output directory is the model directory itself ({src}); expected "
                            "another one")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise QuantizeError(f"quantize: {out} exists and is not an empty directory; --force writes into it")


def _load_stack():
    """transformers, with bnb behind the name bitsandbytes; QuantizeError saying what is missing otherwise."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory: nothing is to be fetched
    for name in ("transformers", "accelerate"):
        if importlib.util.find_spec(name) is None:
            raise QuantizeError(f"quantize: needs {name} (pip install -r tools/requirements-hf.txt), which is not "
                                "installed here")
    try:
        import bitsandbytes
    except ImportError as e:
        raise QuantizeError("quantize: transformers quantizes through the package named bitsandbytes; install bnb's "
                            f"companion (tools/install_shim.sh) to have it run on bnb ({e})") from None
    if "+bnb" not in getattr(bitsandbytes, "__version__", ""):
        raise QuantizeError(f"quantize: bitsandbytes here is bitsandbytes {getattr(bitsandbytes, '__version__', '?')} "
                            f"itself ({os.path.dirname(bitsandbytes.__file__)}), not bnb's companion: transformers "
                            "would quantize with it. See the README, 'bitsandbytes or bnb'")
    import transformers
    transformers.utils.logging.disable_progress_bar()  # ours counts the weights as bnb quantizes them
    return transformers


def _model_class(transformers, config):
    """The class the checkpoint names (config.architectures), else the causal LM or plain model of its type."""
    for name in config.architectures or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        if type(config) in auto._model_mapping:
            return auto
    raise QuantizeError(f"quantize: transformers has no model class for architectures {config.architectures} "
                        f"(model_type {config.model_type!r})")


def _model_dtype(config) -> torch.dtype:
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return dtype if dtype in (torch.float32, torch.bfloat16, torch.float16) else torch.float32


def _bnb_config(transformers, args, compute: torch.dtype):
    skip = args.skip or None
    if args.format == "int8":
        return transformers.BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=args.threshold,
                                               llm_int8_skip_modules=skip)
    return transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=args.format,
                                           bnb_4bit_use_double_quant=not args.no_double_quant,
                                           bnb_4bit_compute_dtype=compute, llm_int8_skip_modules=skip)


def _describe(args, compute: torch.dtype) -> str:
    if args.format == "int8":
        return f"LLM.int8() (int8 rows, outlier threshold {args.threshold})"
    nested = "no nested absmax" if args.no_double_quant else "nested absmax"
    return f"{args.format.upper()} (blocksize 64, {nested}), compute {str(compute).removeprefix('torch.')}"


def _count_linears(model: torch.nn.Module, quantization) -> int:
    """How many weights transformers will quantize, for the bar: the linear layers (and GPT-2's Conv1D) but the
    output embeddings and the skipped modules. An estimate: transformers decides (the bar takes what happens)."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    skip = quantization.llm_int8_skip_modules or []
    n = 0
    for name, module in model.named_modules():
        if module is output or any(s == name or name.endswith("." + s) for s in skip):
            continue
        if isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D":
            n += 1
    return n


@contextlib.contextmanager
def _each_quantization(callback):
    """Calls callback() after each weight bnb quantizes (Params4bit, Int8Params), for the progress bar: transformers
    quantizes inside from_pretrained, one weight at a time, through these two."""
    from .nn import Int8Params, Params4bit
    originals = {cls: cls.__dict__["_quantize"] for cls in (Params4bit, Int8Params)}

    def counted(original):
        def _quantize(self, device):
            result = original(self, device)
            callback()
            return result
        return _quantize

    for cls, original in originals.items():
        cls._quantize = counted(original)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls._quantize = original


def _probe_inputs(transformers, src: Path, config, text: str) -> dict:
    """The probe prompt through the model's tokenizer; seeded random token ids where the directory has none."""
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(src)
    except Exception:  # noqa: BLE001  (no tokenizer files, or one transformers cannot read: ids instead)
        tokenizer = None
    if tokenizer is not None:
        inputs = dict(tokenizer(text, return_tensors="pt"))
        return {"inputs": inputs, "label": f"{text!r} ({inputs['input_ids'].shape[1]} tokens)"}
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (1, 16), generator=g)
    return {"inputs": {"input_ids": ids}, "label": "16 random token ids (the directory has no tokenizer)"}


def _probe(model: torch.nn.Module, probe: dict) -> torch.Tensor:
    with torch.no_grad():
        result = model(**probe["inputs"])
    for what in ("logits", "last_hidden_state"):
        value = getattr(result, what, None)
        if isinstance(value, torch.Tensor):
            probe["what"] = what
            return value.float()
    probe["what"] = "output"
    return result[0].float()


def _checkpoint_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*.safetensors"))


def _copy_other_files(src: Path, out: Path) -> list[str]:
    """Everything of the model directory but its weights (tokenizer, generation and other configs, a
    sentence-transformers pooling folder), where save_pretrained wrote nothing of that name."""
    copied = []
    for path in sorted(src.iterdir()):
        target = out / path.name
        if path.name.endswith(WEIGHT_SUFFIXES) or target.exists() or path.name.startswith("."):
            continue
        if path.is_dir():
            shutil.copytree(path, target)
        else:
            shutil.copy2(path, target)
        copied.append(path.name)
    return copied


def positive_float(text: str) -> float:
    import argparse
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number > 0")
    return value
