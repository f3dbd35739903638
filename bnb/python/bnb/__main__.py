"""python -m bnb <command>: demo (quantize realistic weight shapes and print a table), config (effective knobs),
cache (list, clear or warm the compiled CUDA kernel cache), info (versions and the CPU instruction sets), dispatch
(which kernel serves each op on each dispatch key)."""

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
    if args.command == "config":
        from . import config
        print(config.format_table())  # a misspelt BNB_* variable was warned of at import
        return 0
    return 2


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
