"""python -m bnb <command>: demo (quantize realistic weight shapes and print a table), config (effective knobs),
cache (list, clear or warm the compiled CUDA kernel cache), info (versions and the CPU instruction sets), dispatch
(which kernel serves each op on each dispatch key), quantize (a local Hugging Face model directory to NF4, FP4 or
LLM.int8(), as a checkpoint transformers loads)."""

import argparse
import os
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bnb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="8-bit and NF4 round trips over realistic weight shapes, as a table")
    demo.add_argument("--blocksize", type=_blocksize, default=4096,
                      help="8-bit block size: a power of two from 32 to 4096 (default 4096; NF4 uses 64)")
    demo.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="bfloat16")
    demo.add_argument("--repeat", type=_positive, default=3, help="timed runs per shape (the best is shown)")
    demo.add_argument("--small", action="store_true", help="shapes 8x smaller, for a quick look")
    sub.add_parser("config", help="print every knob's effective value and where it came from")
    cache = sub.add_parser("cache", help="the compiled CUDA kernel cache")
    cache.add_argument("action", choices=["list", "clear", "warm"])
    cache.add_argument("--arch", action="append", help="warm: target such as sm_90 (repeatable; default sm_80, sm_90)")
    info = sub.add_parser("info", help="versions, and which CPU instruction sets run here and which this CPU lacks")
    info.add_argument("--isas", action="store_true", help="only the instruction-set line")
    dispatch = sub.add_parser("dispatch", help="which kernel serves each op on each dispatch key, from the "
                                               "dispatcher itself; --trace: which kernels one call ran")
    dispatch.add_argument("op", nargs="?", help="one op: gemv_4bit (every overload) or gemv_4bit.out (default: all, "
                                                "one line each)")
    dispatch.add_argument("--trace", action="store_true", help="run each op once on its example and show the "
                                                               "kernels that ran, nested")
    dispatch.add_argument("--device", help="where --trace runs (default: a named PrivateUse1 device, else cuda if "
                                           "present, else cpu)")
    dispatch.add_argument("--depth", type=_natural, default=1, help="--trace: how deep to show nested calls "
                                                                    "(default 1: the op's kernel and its calls)")
    quantize = sub.add_parser("quantize", help="a local Hugging Face model directory (config.json, safetensors) to "
                                               "NF4, FP4 or LLM.int8(), written as a checkpoint transformers loads")
    _quantize_arguments(quantize)
    args = parser.parse_args(argv)

    if args.command == "demo":
        from .demo import run_demo
        return run_demo(args)
    if args.command == "cache":
        return run_cache(args)
    if args.command == "info":
        from .info import run_info
        return run_info(args.isas)
    if args.command == "dispatch":
        from .dispatch_cli import run_dispatch
        return run_dispatch(args)
    if args.command == "quantize":
        from .quantize_cli import run_quantize
        return run_quantize(args)
    if args.command == "config":
        from . import config
        print(config.format_table())  # a misspelt BNB_* variable was warned of at import
        return 0
    return 2


def _quantize_arguments(p: argparse.ArgumentParser) -> None:
    from .quantize_cli import DTYPES, FORMATS, positive_float
    p.add_argument("model", help="the model directory: config.json and *.safetensors (as save_pretrained writes)")
    p.add_argument("output", help="where to write the quantized checkpoint: a new or empty directory")
    p.add_argument("--format", choices=FORMATS, default="nf4", help="nf4 (default), fp4, or int8 (LLM.int8())")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="the dtype of the weights kept unquantized (default: the checkpoint's)")
    p.add_argument("--compute-dtype", choices=DTYPES, default="auto",
                   help="4-bit: the dtype the matmuls run in (default: --dtype's)")
    p.add_argument("--no-double-quant", action="store_true", help="4-bit: keep absmax in float32 (no nested "
                                                                  "8-bit statistics)")
    p.add_argument("--threshold", type=positive_float, default=6.0,
                   help="int8: the outlier threshold of LLM.int8() (default 6.0)")
    p.add_argument("--skip", action="append", metavar="MODULE",
                   help="a module name to keep unquantized (repeatable; the output embeddings always are)")
    p.add_argument("--probe", default="The capital of France is",
                   help="the prompt whose output is compared before and after (default %(default)r)")
    p.add_argument("--force", action="store_true", help="write into an output directory that is not empty")


def _blocksize(text: str) -> int:
    from .functional import _BLOCKSIZES
    if not text.isdigit() or int(text) not in _BLOCKSIZES:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(map(str, _BLOCKSIZES))}")
    return int(text)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return int(text)


def _natural(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 0")
    return int(text)


def _report(e: Exception) -> None:
    """An error as one line on stderr, "bnb: " first (some of the C++ messages carry it already)."""
    print(e if str(e).startswith("bnb:") else f"bnb: {e}", file=sys.stderr)


def run_cache(args) -> int:
    from . import jit
    if args.action == "list":
        files = jit.cache_list()
        kernels = [f for f in files if f[0].endswith(".bnbk")]
        unfinished = len(files) - len(kernels)  # temp files: stores in progress, or left by a killed process
        print(f"{jit.cache_dir()}: {len(kernels)} kernels, {sum(f[1] for f in kernels) / 1e6:.1f} MB"
              + (f"; {unfinished} temp files of unfinished writes" if unfinished else ""))
        for name, size, _ in files:
            print(f"  {name}  {size} bytes")
    elif args.action == "clear":
        print(f"removed {jit.cache_clear()} kernels from {jit.cache_dir()}")
    else:
        failed = False
        for arch in args.arch or ["sm_80", "sm_90"]:  # a bad one is reported, and the others still warmed
            try:
                n = jit.cache_warm(arch)
            except (ValueError, RuntimeError) as e:
                _report(e)
                failed = True
                continue
            print(f"{arch}: {n} kernels in {jit.cache_dir()}")
        return 2 if failed else 0
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, KeyError) as e:  # a bad config file or argument: its message says what and where
        _report(e)
        sys.exit(2)
    except BrokenPipeError:  # `python -m bnb cache list | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush raises nothing more
        sys.exit(1)
