"""Compiles bnb's kernel templates for a GPU target with NVRTC (as bnb/jit/cuda/nvrtc_compiler.cc does: the
template's .cuh included by a one-line program, every bnb/jit/kernels/*.cuh as a header, -std=c++17 -arch=sm_XX
-minimal) and reads the cubin's SASS with cuobjdump: no GPU needed. Prints, per kernel, registers, stack and local
memory, the global loads and stores by width, and the hot loop's instruction count per element; --check asserts the
properties the SASS review of issue 22 fixed.

  python3 tools/gpu/sass_check.py [--arch sm_90] [--check] [--sass] [SPEC ...]

SPEC is "template:entry<args>", e.g. "blockwise8:dequantize_blockwise8<bnb::bf16, 256, 256>" (default: the hot
kernels below). NVRTC: --nvrtc, else $BNB_CUDA_NVRTC_PATH, else the nvidia-cuda-nvrtc wheel of this Python, else
$CUDA_HOME/lib64. cuobjdump: --cuobjdump, else $CUOBJDUMP, PATH, $CUDA_HOME/bin, or the nvidia-cuda-cuobjdump
wheel (pip install nvidia-cuda-cuobjdump into any environment and name it with --cuobjdump).

The hot loop is the loop (a backward branch's range) with the most instructions of its own (nested loops, the
guarded element paths, left out): the unrolled vector path. "instr/elem" counts its instructions, less the
conditional regions that only lead to a CALL (the out-of-line exact path of 8-bit quantize, rarely taken), per
element one iteration of one thread handles: a static count of the common path, not a measurement.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import glob
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ROOT / "bnb/jit/kernels"

# The kernels whose speed matters, at the default 256 threads (bnb/jit/threads_per_block.h) and gemv4's default
# 2 rows per warp (bnb/jit/blockwise4.h).
DEFAULT_SPECS = [
    *(f"blockwise8:quantize_blockwise8<{t}, {bs}, 256>" for t in ("float", "bnb::bf16") for bs in (64, 4096)),
    *(f"blockwise8:dequantize_blockwise8<{t}, {bs}, 256>" for t in ("float", "bnb::half", "bnb::bf16")
      for bs in (64, 256, 4096)),
    *(f"blockwise4:quantize_blockwise4<{t}, {bs}, 256, 0>" for t in ("float", "bnb::bf16") for bs in (64, 4096)),
    *(f"blockwise4:dequantize_blockwise4<{t}, {bs}, 256>" for t in ("float", "bnb::half", "bnb::bf16")
      for bs in (64, 4096)),
    *(f"blockwise4:gemv4<{t}, 256, 2>" for t in ("float", "bnb::half", "bnb::bf16")),
    "blockwise8:prepare_codebook8<256>",
]

# Entries whose hot loops still touch local memory, with why: --check reports them as OPEN instead of failing.
# (quantize_blockwise8 was one until its exact path moved out of the unrolled loop.)
KNOWN_OPEN: dict[str, str] = {}


# ---------------------------------------------------------------------------------------------------------- NVRTC

def _wheel_nvrtc() -> str:
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for cu, so in (("cu13", "libnvrtc.so.13"), ("cuda_nvrtc", "libnvrtc.so.12"), ("cu12", "libnvrtc.so.12")):
            if os.path.exists(os.path.join(root, cu, "lib", so)):
                return os.path.join(root, cu, "lib", so)
    return ""


def find_nvrtc(explicit: str | None) -> str:
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    for cand in (explicit, os.environ.get("BNB_CUDA_NVRTC_PATH"), _wheel_nvrtc(),
                 *sorted(glob.glob(f"{cuda_home}/lib64/libnvrtc.so.1[0-9]"), reverse=True)):
        if cand and os.path.exists(cand):
            return cand
    sys.exit("sass_check: no libnvrtc found (tried --nvrtc, $BNB_CUDA_NVRTC_PATH, the nvidia-cuda-nvrtc wheel, "
             f"{cuda_home}/lib64)")


def find_cuobjdump(explicit: str | None) -> str:
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    wheel = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        wheel += glob.glob(os.path.join(root, "cu1[0-9]", "bin", "cuobjdump"))
    for cand in (explicit, os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), f"{cuda_home}/bin/cuobjdump",
                 *wheel):
        if cand and os.path.exists(cand):
            return cand
    sys.exit("sass_check: no cuobjdump (pip install nvidia-cuda-cuobjdump into some venv, then --cuobjdump PATH)")


class Nvrtc:
    def __init__(self, path: str):
        # NVRTC opens libnvrtc-builtins by name: preload the copy beside it (a wheel is not on the loader's path).
        for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*")):
            ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        self.path = path

    def _ok(self, r: int, what: str, log: str = "") -> None:
        if r != 0:
            raise RuntimeError(f"{what}: {self.lib.nvrtcGetErrorString(r).decode()} (NVRTC {self.path}){log}")

    def compile(self, template: str, name_expr: str, arch: str) -> bytes:
        """The cubin of `name_expr` from template `template`, as bnb's NvrtcCompiler builds it."""
        names = sorted(p.name for p in KERNELS.glob("*.cuh"))
        texts = [(KERNELS / n).read_bytes() for n in names]
        arr = ctypes.c_char_p * len(names)
        prog = ctypes.c_void_p()
        src = f'#include "{template}.cuh"\n'.encode()
        self._ok(self.lib.nvrtcCreateProgram(ctypes.byref(prog), src, f"bnb_{template}.cu".encode(), len(names),
                                             arr(*texts), arr(*(n.encode() for n in names))), "nvrtcCreateProgram")
        try:
            self._ok(self.lib.nvrtcAddNameExpression(prog, name_expr.encode()), "nvrtcAddNameExpression")
            # bnb/jit/cuda/nvrtc_compiler.cc's NvrtcOptionsFor, sorted, for an arch NVRTC knows (no knobs are used).
            opts = [f"-arch={arch}".encode(), b"-minimal", b"-std=c++17"]
            r = self.lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
            if r != 0:
                size = ctypes.c_size_t()
                self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
                log = ctypes.create_string_buffer(size.value)
                self.lib.nvrtcGetProgramLog(prog, log)
                self._ok(r, f"compiling {name_expr} for {arch}", "\n" + log.value.decode(errors="replace"))
            size = ctypes.c_size_t()
            self._ok(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            buf = ctypes.create_string_buffer(size.value)
            self._ok(self.lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
            return buf.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


# ----------------------------------------------------------------------------------------------------------- SASS

@dataclasses.dataclass
class Instr:
    addr: int
    pred: str    # "@P0", "@!P1" or ""
    op: str      # "STG.E.128"
    args: str

    @property
    def base(self) -> str:
        return self.op.split(".")[0]

    def branch_target(self) -> int | None:
        if self.base not in ("BRA", "BRX"):
            return None
        m = re.search(r"0x([0-9a-f]+)\s*$", self.args)
        return int(m.group(1), 16) if m else None


_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);")


def parse_sass(text: str) -> list[Instr]:
    return [Instr(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4).strip())
            for m in map(_LINE.search, text.splitlines()) if m]


def mem_width(i: Instr) -> int:
    """Bits moved by a global/local load or store (0 for other instructions)."""
    if i.base not in ("LDG", "STG", "LDL", "STL"):
        return 0
    for part in i.op.split(".")[1:]:
        if part in ("64", "128"):
            return int(part)
        if part in ("U8", "S8"):
            return 8
        if part in ("U16", "S16"):
            return 16
    return 32


@dataclasses.dataclass
class Loop:
    head: int
    tail: int   # address of the backward branch

    def contains(self, a: int) -> bool:
        return self.head <= a <= self.tail


def loops(ins: list[Instr]) -> list[Loop]:
    return [Loop(t, i.addr) for i in ins if (t := i.branch_target()) is not None and t <= i.addr]


def own_body(ins: list[Instr], loop: Loop, all_loops: list[Loop]) -> list[Instr]:
    """The loop's instructions outside loops nested in it."""
    inner = [l for l in all_loops if l is not loop and loop.contains(l.head) and loop.contains(l.tail)
             and (l.head, l.tail) != (loop.head, loop.tail)]
    return [i for i in ins if loop.contains(i.addr) and not any(l.contains(i.addr) for l in inner)]


def call_regions(body: list[Instr]) -> set[int]:
    """Addresses of the conditional regions that lead to a CALL: for each CALL, the instructions a predicated
    forward branch skips over to get past it (the smallest such region)."""
    skipped: set[int] = set()
    for c in (i for i in body if i.base == "CALL"):
        best = None
        for b in body:
            t = b.branch_target()
            if b.pred and t is not None and b.addr < c.addr < t and (best is None or t - b.addr < best[1] - best[0]):
                best = (b.addr, t)
        if best:
            skipped |= {i.addr for i in body if best[0] < i.addr < best[1]}
        else:
            skipped.add(c.addr)
    return skipped


# -------------------------------------------------------------------------------------------------------- kernels

_SPEC = re.compile(r"^(\w+):(\w+)(?:<(.*)>)?$")
VEC = {"float": 4, "bnb::half": 8, "bnb::bf16": 8}


def elements_per_iteration(entry: str, args: list[str]) -> int | None:
    """Elements one thread handles per hot-loop iteration, as the templates' Shape / GemvShape compute them."""
    if entry in ("quantize_blockwise8", "dequantize_blockwise8"):
        vec, bs, threads = VEC[args[0]], int(args[1]), int(args[2])
        return max(bs // threads, vec)
    if entry in ("quantize_blockwise4", "dequantize_blockwise4"):
        vec, bs, threads = VEC[args[0]], int(args[1]), int(args[2])
        return max(bs // threads, 2 * vec)
    if entry == "gemv4":
        return 2 * int(args[2]) * 32  # GemvShape::U pieces of 32 weights, for each of ROWS rows
    if entry == "optimizer_update8":
        return int(args[3])  # PER elements of a state block a thread
    return None


@dataclasses.dataclass
class Report:
    spec: str
    entry: str
    regs: int
    stack: int
    local: int
    instrs: int
    ldg: dict[int, int]
    stg: dict[int, int]
    hot_ldg: dict[int, int]
    hot_stg: dict[int, int]
    hot_local: int
    hot_calls: int
    per_elem: float | None
    sass: str


def widths(ins, base) -> dict[int, int]:
    out: dict[int, int] = {}
    for i in ins:
        if i.base == base:
            out[mem_width(i)] = out.get(mem_width(i), 0) + 1
    return dict(sorted(out.items(), reverse=True))


def analyse(spec: str, nvrtc: Nvrtc, cuobjdump: str, arch: str) -> Report:
    m = _SPEC.match(spec.replace(" ", ""))
    if not m:
        sys.exit(f"sass_check: bad spec {spec!r}; want template:entry<args>, e.g. blockwise4:gemv4<bnb::bf16,256,2>")
    template, entry, argtext = m.groups()
    args = [a for a in (argtext or "").split(",") if a]
    name_expr = f"{entry}<{', '.join(args)}>" if args else entry
    cubin = nvrtc.compile(template, name_expr, arch)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([cuobjdump, "-sass", f.name], check=True, capture_output=True, text=True).stdout
        res = subprocess.run([cuobjdump, "-res-usage", f.name], check=True, capture_output=True, text=True).stdout
    usage = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", res))
    ins = parse_sass(sass)
    ls = loops(ins)
    bodies = [(own_body(ins, l, ls), l) for l in ls]
    hot = max(bodies, key=lambda b: len(b[0]))[0] if bodies else []
    common = [i for i in hot if i.addr not in call_regions(hot)]
    per = elements_per_iteration(entry, args)
    return Report(spec, entry, int(usage.get("REG", 0)), int(usage.get("STACK", 0)), int(usage.get("LOCAL", 0)),
                  len(ins), widths(ins, "LDG"), widths(ins, "STG"), widths(hot, "LDG"), widths(hot, "STG"),
                  sum(1 for i in hot if i.base in ("LDL", "STL")), sum(1 for i in hot if i.base == "CALL"),
                  len(common) / per if per and hot else None, sass)


def fmt_widths(w: dict[int, int]) -> str:
    return " ".join(f"{n}x{b}" for b, n in w.items()) or "-"


# --------------------------------------------------------------------------------------------------------- checks

def stores_are_128_bit(r: Report) -> str | None:
    """Dequantize writes whole 16-byte vectors: its hot loop stores with STG.E.128 and no 32-bit stores (four of
    those were one Vec16 split apart)."""
    if not r.entry.startswith("dequantize"):
        return None
    if r.hot_stg.get(128, 0) == 0 or r.hot_stg.get(32, 0):
        return f"hot-loop stores {fmt_widths(r.hot_stg)}: want 128-bit only"
    return None


def no_local_memory_in_hot_loop(r: Report) -> str | None:
    if r.hot_local:
        return f"{r.hot_local} local-memory (LDL/STL) instructions in the hot loop"
    return None


def run_checks(reports: list[Report]) -> int:
    failed = 0
    for r in reports:
        for check in (stores_are_128_bit, no_local_memory_in_hot_loop):
            problem = check(r)
            if problem and check is no_local_memory_in_hot_loop and r.entry in KNOWN_OPEN:
                print(f"OPEN {r.spec}: {problem} ({KNOWN_OPEN[r.entry]})")
            elif problem:
                print(f"FAIL {r.spec}: {problem} [{check.__name__}]")
                failed += 1
    print(f"sass_check: {len(reports)} kernels, {failed} failed")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*", help="template:entry<args> (default: the hot kernels)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--nvrtc")
    ap.add_argument("--cuobjdump")
    ap.add_argument("--check", action="store_true", help="assert the SASS properties; exit 1 on a failure")
    ap.add_argument("--sass", action="store_true", help="print each kernel's SASS too")
    a = ap.parse_args()
    nvrtc = Nvrtc(find_nvrtc(a.nvrtc))
    cuobjdump = find_cuobjdump(a.cuobjdump)
    reports = [analyse(s, nvrtc, cuobjdump, a.arch) for s in (a.specs or DEFAULT_SPECS)]
    head = (f"{'kernel (' + a.arch + ')':<52}{'regs':>5}{'stack':>6}{'instrs':>7}{'instr/elem':>11}"
            f"  {'hot LDG bits':<14}{'hot STG bits':<14}{'hot LDL/STL':>11}{'CALL':>5}")
    print(head)
    print("-" * len(head))
    for r in reports:
        per = f"{r.per_elem:.1f}" if r.per_elem is not None else "-"
        print(f"{r.spec.split(':', 1)[1]:<52}{r.regs:>5}{r.stack:>6}{r.instrs:>7}{per:>11}  "
              f"{fmt_widths(r.hot_ldg):<14}{fmt_widths(r.hot_stg):<14}{r.hot_local:>11}{r.hot_calls:>5}")
        if a.sass:
            print(r.sass)
    return run_checks(reports) if a.check else 0


if __name__ == "__main__":
    sys.exit(main())
