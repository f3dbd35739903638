"""python -m bnb <command>: demo (quantize realistic weight shapes and print a table), config (effective knobs)."""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bnb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="8-bit blockwise round trip over realistic weight shapes, as a table")
    demo.add_argument("--blocksize", type=int, default=4096)
    demo.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="bfloat16")
    demo.add_argument("--repeat", type=int, default=3, help="timed runs per shape (the best is shown)")
    demo.add_argument("--small", action="store_true", help="shapes 8x smaller, for a quick look")
    sub.add_parser("config", help="print every knob's effective value and where it came from")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from .demo import run_demo
        return run_demo(args)
    if args.command == "config":
        from . import config
        print(config.format_table())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
