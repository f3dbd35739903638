"""Packs Python files (and an extension) into a wheel (a zip with dist-info), for the wheel Bazel targets: bnb's own
and the companion `bitsandbytes` (pure Python, --pure). --metadata-only writes just the METADATA file, the one a
dist-info directory needs for importlib.metadata to find the distribution (the companion's Bazel py_library).

Each source path is stored relative to the first --root it lies under, so generated files (under the genfiles
dir) and checked-in ones land side by side in the package.
"""

import argparse
import base64
import hashlib
import os
import zipfile


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def metadata(args) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {args.name}", f"Version: {args.version}", f"Summary: {args.summary}"]
    requires = ["torch>=2.6"] if args.requires is None else [r for r in args.requires if r]  # --requires= : none
    lines += [f"Requires-Dist: {r}" for r in requires]
    return ("\n".join(lines) + "\n").encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="bnb")
    ap.add_argument("--version", required=True)
    ap.add_argument("--summary", default="k-bit quantization for PyTorch")
    ap.add_argument("--requires", action="append", help="a Requires-Dist line (repeatable; default torch>=2.6; "
                    "--requires= for none)")
    ap.add_argument("--tag", help="the CPython tag of a platform wheel (cp311); not with --pure")
    ap.add_argument("--pure", action="store_true", help="a pure-Python wheel, py3-none-any")
    ap.add_argument("--metadata-only", action="store_true", help="write only the METADATA file to --out")
    ap.add_argument("--root", action="append", default=[])
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()

    if args.metadata_only:
        with open(args.out, "wb") as f:
            f.write(metadata(args))
        return
    if args.pure == bool(args.tag):
        raise SystemExit("build_wheel: give either --tag (a platform wheel) or --pure")

    entries = {}
    for path in args.files:
        root = next((r for r in args.root if path.startswith(r.rstrip("/") + "/")), None)
        if root is None:
            raise SystemExit(f"build_wheel: {path} lies under none of the roots {args.root}")
        with open(path, "rb") as f:
            entries[os.path.relpath(path, root)] = f.read()

    tag = "py3-none-any" if args.pure else f"{args.tag}-{args.tag}-linux_x86_64"
    dist = f"{args.name}-{args.version}.dist-info"
    entries[f"{dist}/METADATA"] = metadata(args)
    entries[f"{dist}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: bnb tools/build_wheel.py\n"
                                f"Root-Is-Purelib: {'true' if args.pure else 'false'}\nTag: {tag}\n").encode()
    lines = [record_line(name, data) for name, data in sorted(entries.items())] + [f"{dist}/RECORD,,"]
    entries[f"{dist}/RECORD"] = ("\n".join(lines) + "\n").encode()

    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # fixed: the same inputs give the same wheel
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)


if __name__ == "__main__":
    main()
