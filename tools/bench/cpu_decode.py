"""CPU benchmark: greedy decoding through a whole transformers model loaded in 4 bits (load_in_4bit, NF4, bfloat16
compute), on bnb (through its companion package `bitsandbytes`) and on bitsandbytes itself where --peer-path names
a directory holding it, beside the same model in bfloat16 without quantization. Each runs in a process of its own
(the two cannot share one: both are imported as `bitsandbytes`), on the same random-weight Llama saved once.

Figures: milliseconds per decoding step (a generation's time less a forward of the prompt, over the tokens after
the first; the median of rounds) after a warm-up generation; the prompt's forward (prefill) is timed apart.
Needs transformers and accelerate (tools/requirements-hf.txt). Run: .venv/bin/python tools/bench/cpu_decode.py
[--peer-path DIR] [--layers N] [--hidden H].
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def companion_path() -> str:
    """The directory holding bnb's companion package `bitsandbytes`: the source tree's, else an importable one's
    (a Bazel test's runfiles, an installed companion)."""
    source = os.path.join(ROOT, "bnb", "python", "bitsandbytes_shim")
    if os.path.isdir(os.path.join(source, "bitsandbytes")):
        return source
    import bitsandbytes
    if "+bnb" not in getattr(bitsandbytes, "__version__", ""):
        raise RuntimeError(f"cpu_decode: the bitsandbytes importable here ({bitsandbytes.__file__}) is not bnb's "
                           "companion package; run from the source tree or install it (tools/install_shim.sh)")
    return os.path.dirname(os.path.dirname(os.path.abspath(bitsandbytes.__file__)))


def save_model(directory, hidden, layers, vocab):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=hidden, intermediate_size=int(hidden * 3.5) // 64 * 64, num_hidden_layers=layers,
                         num_attention_heads=max(1, hidden // 128), num_key_value_heads=max(1, hidden // 512),
                         vocab_size=vocab, max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(directory)


def run_case(directory, quantized, tokens, rounds):
    """In this process: load the model, time the decoding, and print one JSON line."""
    import time

    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    kwargs = {"dtype": torch.bfloat16}
    if quantized:
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(directory, device_map="cpu", **kwargs).eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    args = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        model.generate(prompt, **args)  # warm-up
        per_token, prefill = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            model(prompt)
            t1 = time.perf_counter()
            out = model.generate(prompt, **args)
            t2 = time.perf_counter()
            prefill.append(t1 - t0)
            # generate's first token comes from the prompt's forward (timed apart); the others each take a step
            per_token.append(((t2 - t1) - (t1 - t0)) / (tokens - 1))
    import bitsandbytes
    print(json.dumps({"ms_per_token": sorted(per_token)[len(per_token) // 2] * 1e3,
                      "prefill_ms": sorted(prefill)[len(prefill) // 2] * 1e3, "tokens": out.shape[1],
                      "bitsandbytes": getattr(bitsandbytes, "__version__", "?")}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--peer-path", help="a directory holding the real bitsandbytes package (e.g. pip --target)")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--elements", type=int, help="ignored (tools/bench/run_cpu.sh passes it to every benchmark)")
    ap.add_argument("--case", choices=["bf16", "4bit"], help=argparse.SUPPRESS)  # a child process's own case
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tokens < 2:
        ap.error(f"--tokens must be at least 2 (the first comes from the prompt's forward), got {args.tokens}")
    if args.case:
        return run_case(args.model, args.case == "4bit", args.tokens, args.rounds)

    import torch
    try:
        import accelerate  # noqa: F401  (device_map needs it)
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"cpu_decode: skipped, {e} (tools/requirements-hf.txt installs the Hugging Face stack)")
        return
    with tempfile.TemporaryDirectory() as directory:
        save_model(directory, args.hidden, args.layers, args.vocab)
        shim = companion_path()
        cases = [("bf16, not quantized", "bf16", shim), ("bnb NF4 (companion package)", "4bit", shim)]
        if args.peer_path:
            cases.append(("bitsandbytes NF4", "4bit", args.peer_path))
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; Llama, hidden {args.hidden}, "
              f"{args.layers} layers, vocab {args.vocab}; greedy, {args.tokens} new tokens after 16, median of "
              f"{args.rounds} rounds")
        head = f"{'case':<32}{'ms/token':>10}{'prefill ms':>12}  package"
        print(head)
        print("-" * len(head))
        for name, case, path in cases:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([path] + sys.path), HF_HUB_OFFLINE="1",
                       TRANSFORMERS_VERBOSITY="error")
            cmd = [sys.executable, os.path.abspath(__file__), "--case", case, "--model", directory, "--tokens",
                   str(args.tokens), "--rounds", str(args.rounds)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not lines:
                print(f"{name:<32}  failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
                continue
            r = json.loads(lines[-1])
            print(f"{name:<32}{r['ms_per_token']:>10.2f}{r['prefill_ms']:>12.1f}  bitsandbytes {r['bitsandbytes']}")


if __name__ == "__main__":
    main()
