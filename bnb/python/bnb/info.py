"""python -m bnb info: what bnb runs on here. The instruction-set line also ends the test summary (tools/test.sh)
and heads the demo, so every run says which CPU targets its kernels were and were not exercised on."""

import torch

from . import _C
from ._version import __version__


def isa_line() -> str:
    """The instruction sets compiled into bnb that this CPU has (the tests run each of them) and those it lacks."""
    here = _C.cpu_isas()
    missing = [isa for isa in _C.cpu_isas_compiled() if isa not in here]
    return (f"CPU instruction sets exercised here: {' '.join(here)}; compiled in but not on this CPU (not exercised): "
            f"{' '.join(missing) or 'none'}")


def run_info(isas_only: bool = False) -> int:
    if not isas_only:
        print(f"bnb {__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads")
        print(f"CPU kernels dispatch to: {_C.cpu_isa()} (cap: knob cpu.isa); int8 product: {_C.int8_gemm_kernel()}")
        gemv = {dtype: _C.gemv4_kernel(dtype, 4096) for dtype in ("float32", "bfloat16")}
        print(f"gemv_4bit (K a multiple of 128): float32/float16 A {gemv['float32']}, bfloat16 A {gemv['bfloat16']} "
              "(knob cpu.gemv_bf16_products)")
        small = {dtype: _C.gemm4_small_kernel(dtype, 16, 4096) for dtype in ("float32", "bfloat16")}
        print(f"gemm_4bit, 16 rows (K a multiple of 128): float32/float16 A {small['float32']}, bfloat16 A "
              f"{small['bfloat16']}")
        packed = {dtype: _C.gemm4_packed_kernel(dtype, 16) for dtype in ("float32", "bfloat16")}
        print(f"tiled layout (cpu.pack_4bit), 16 rows: float32/float16 A {packed['float32']}, bfloat16 A "
              f"{packed['bfloat16']} (knob cpu.amx)")
        from . import config
        print(f"CPU output cache: freed outputs of 8 MB and up kept for reuse, at most "
              f"{config.get('cpu.output_cache_mb')} MB (knob cpu.output_cache_mb; "
              f"bnb.utils.empty_cpu_output_cache() releases them)")
    print(isa_line())
    return 0
