"""GPU benchmark (tools/gpu/check.sh, tools/gpu/build.sh): what the JIT costs on first use, per kernel. A fresh process
with an empty kernel cache calls each op once and reports how many kernels it compiled and NVRTC's time per kernel;
a second fresh process on the same cache reports the disk hits' load time per kernel (read and checks). Both print
the wall time of that first call, which adds loading the module into the GPU. Goals (issue 22): compile <= 150 ms,
disk-hit load <= 1 ms per kernel.
"""

import json
import os
import subprocess
import sys
import tempfile

import torch

# Runs in the fresh processes: each step once, the JIT's counters reset before it.
PROBE = r"""
import json, time, torch, bnb
ops = torch.ops.bnb
x = torch.randn(1 << 20, device="cuda", dtype=torch.bfloat16)
code = bnb.functional.create_dynamic_map().cuda()
W = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
v = {}
steps = [
    ("quantize_blockwise bf16 bs4096", lambda: v.update(q8=ops.quantize_blockwise(x, code, 4096))),
    ("dequantize_blockwise bf16 bs4096", lambda: ops.dequantize_blockwise(*v["q8"], code, 4096, torch.bfloat16)),
    ("quantize_blockwise bf16 bs64", lambda: ops.quantize_blockwise(x, code, 64)),
    ("quantize_4bit nf4 bf16 bs64", lambda: v.update(q4=ops.quantize_4bit(W, 64, "nf4", torch.uint8))),
    ("dequantize_4bit nf4 bf16 bs64",
     lambda: ops.dequantize_4bit(*v["q4"], 64, "nf4", [4096, 4096], torch.bfloat16)),
    ("gemv_4bit bf16", lambda: ops.gemv_4bit(x[:4096].view(1, -1), v["q4"][0], [4096, 4096], v["q4"][1],
                                             bnb.functional.get_4bit_type("nf4", "cuda"), 64)),
    ("int8_vectorwise_quant bf16", lambda: ops.int8_vectorwise_quant(W, 6.0)),
]
torch.cuda.synchronize()
out = []
for name, fn in steps:
    bnb.jit.reset_stats()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    out.append(dict(bnb.jit.stats(), step=name, wall_ms=(time.perf_counter() - t0) * 1e3))
print(json.dumps(out))
"""


def probe(cache_dir: str) -> list:
    env = dict(os.environ, BNB_CACHE_DIR=cache_dir)
    run = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"the JIT probe failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.splitlines()[-1])


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: the GPU JIT benchmark is skipped")
        return
    with tempfile.TemporaryDirectory() as cache:
        first, second = probe(cache), probe(cache)
    head = (f"{'first use of':<34}{'kernels':>8}{'compile ms':>12}{'first call ms':>15}"
            f"{'disk hits':>10}{'load ms':>9}{'first call ms':>15}")
    print(head)
    print("-" * len(head))
    worst_compile = worst_load = 0.0
    for a, b in zip(first, second):
        each = a["compile_ms"] / a["compiles"] if a["compiles"] else 0.0
        load = b["disk_load_ms"] / b["disk_hits"] if b["disk_hits"] else 0.0
        worst_compile, worst_load = max(worst_compile, each), max(worst_load, load)
        print(f"{a['step']:<34}{a['compiles']:>8}{each:>12.0f}{a['wall_ms']:>15.0f}"
              f"{b['disk_hits']:>10}{load:>9.2f}{b['wall_ms']:>15.1f}")
        if b["compiles"]:
            print(f"  (the second process compiled {b['compiles']} kernels: the disk cache did not serve them)")
    print(f"JIT: slowest compile {worst_compile:.0f} ms per kernel (goal <= 150), slowest disk-hit load "
          f"{worst_load:.2f} ms per kernel (goal <= 1)")


if __name__ == "__main__":
    main()
