"""`python -m bnb quantize` as a user runs it, on a small random Llama saved locally: NF4 and LLM.int8()
checkpoints that transformers loads with no quantization_config, the sizes and the cosine it prints checked against
the files and an independent forward; bad input is a one-line error, exit status 2, with nothing written."""

import os
import re
import subprocess
import sys

import pytest
import torch

from hf_helpers import cosine, import_stack, save_tiny_llama

transformers, peft, accelerate = import_stack()

import bnb  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("llama"))


def quantize(cwd, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    return subprocess.run([sys.executable, "-m", "bnb", "quantize", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def safetensors_bytes(directory) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.safetensors"))


@pytest.mark.parametrize("fmt,module,ratio", [("nf4", bnb.nn.Linear4bit, (2.2, 2.7)),
                                              ("int8", bnb.nn.Linear8bitLt, (1.9, 2.2))])
def test_writes_a_checkpoint_transformers_loads_and_reports_sizes_and_cosine(model_dir, tmp_path, fmt, module, ratio):
    out = tmp_path / "out"
    run = quantize(tmp_path, model_dir, out, "--format", fmt)
    assert run.returncode == 0, run.stderr
    assert "100% 14/14 weights" in run.stdout, run.stdout  # the progress bar counted every projection

    model = LlamaForCausalLM.from_pretrained(out, device_map="cpu").eval()  # no quantization_config: the checkpoint's
    layers = [m for m in model.modules() if isinstance(m, module)]
    assert len(layers) == 14

    sizes = re.search(r"(\d+) -> (\d+) bytes", run.stdout)
    before, after = int(sizes[1]), int(sizes[2])
    assert (before, after) == (safetensors_bytes(model_dir), safetensors_bytes(out))
    # The embeddings and lm_head (2 x 512 x 128) stay fp32; the projections shrink to ~1/7 (NF4) or ~1/4 (int8).
    assert ratio[0] < before / after < ratio[1], before / after

    printed = float(re.search(r"logits cosine (\d\.\d+)", run.stdout)[1])
    ids = torch.randint(0, 512, (1, 16), generator=torch.Generator().manual_seed(0))  # the CLI's probe, no tokenizer
    original = LlamaForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        expected = cosine(model(ids).logits, original(ids).logits)
    assert printed == pytest.approx(expected, abs=2e-6)
    assert (0.97 if fmt == "nf4" else 0.999) < printed < 1 - 1e-7, printed


def test_a_missing_model_directory_is_a_one_line_error(tmp_path):
    run = quantize(tmp_path, tmp_path / "nowhere", tmp_path / "out")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.count("\n") == 1 and "nowhere has no config.json" in run.stderr
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_not_overwritten_without_force(model_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    run = quantize(tmp_path, model_dir, out)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.count("\n") == 1 and "--force" in run.stderr and str(out) in run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"


def test_an_unknown_format_is_rejected_before_anything_is_written(model_dir, tmp_path):
    run = quantize(tmp_path, model_dir, tmp_path / "out", "--format", "nf5")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "'nf5'" in errors[0] and "nf4" in errors[0], run.stderr
    assert not (tmp_path / "out").exists()
