"""Packs bnb's Python files and its extension into a wheel (a zip with dist-info), for the wheel Bazel target.

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--root", action="append", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()

    entries = {}
    for path in args.files:
        root = next((r for r in args.root if path.startswith(r.rstrip("/") + "/")), None)
        if root is None:
            raise SystemExit(f"build_wheel: {path} lies under none of the roots {args.root}")
        with open(path, "rb") as f:
            entries[os.path.relpath(path, root)] = f.read()

    dist = f"bnb-{args.version}.dist-info"
    entries[f"{dist}/METADATA"] = (f"Metadata-Version: 2.1\nName: bnb\nVersion: {args.version}\n"
                                   "Summary: k-bit quantization for PyTorch\nRequires-Dist: torch>=2.6\n").encode()
    entries[f"{dist}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: bnb tools/build_wheel.py\nRoot-Is-Purelib: false\n"
                                f"Tag: {args.tag}-{args.tag}-linux_x86_64\n").encode()
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
