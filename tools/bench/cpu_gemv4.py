"""CPU benchmark of the 4-bit matrix-vector product, one token: bnb's gemv_4bit on bitsandbytes' layout and its
matmul_4bit (as Linear4bit calls it: over the tiled copy of the weight, cpu.pack_4bit; and with the opt-in
cpu.int8_activations, where the CPU has AVX512-VNNI) beside bitsandbytes' (where
importable: its gemv_4bit on the weight as stored, and its Linear4bit in eval mode, which repacks the weight into
its CPU layout as transformers' inference gets it), torch's int4 kernel (_weight_int4pack_mm_for_cpu), F.linear on
the dense weight, and a memory copy as the limit, all in one run, at each thread count.

"% of limit": the weight's bytes (packed codes and absmax statistics) read per second against the bytes a memory
copy moves (read plus written) per second, the median over rounds of the ratio within a round; the copy's buffers
are 256 MB each (timing.memory_copy), so it runs at memory's speed, as the weights are read. The 4-bit weight is NF4,
nested absmax (compress_statistics=True), as QLoRA stores it. Run: tools/bench/run_cpu.sh, or
.venv/bin/python tools/bench/cpu_gemv4.py; bitsandbytes from an unpacked wheel: PYTHONPATH=<dir> (not installed:
it would shadow nothing of bnb, but pip sees one 'bitsandbytes' only). llama.cpp's ggml in the same run: --loop
--ggml-peer <a build of tools/bench/ggml_peer.c> (its header says how to build it; ggml is no dependency).
"""

import argparse
import subprocess
import time

import torch

import bnb
from bnb import functional as F
from timing import cache_cleaner, dtype_name, machine_line, memory_copy, round_seconds, weight_shapes

# One Llama-3-8B decoder layer's linears, N x K: q, k, v, o, gate, up, down.
LLAMA3_8B_LAYER = [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096),
                   (4096, 14336)]


def bnb_case(W, dtype, blocksize):
    packed, state = F.quantize_4bit(W.to(dtype), blocksize=blocksize, quant_type="nf4", compress_statistics=True)
    weight_bytes = packed.numel() + state.absmax.numel() + state.state2.absmax.numel() * 4 + 256 * 4
    return weight_bytes, lambda a: F.gemv_4bit(a, packed, state=state)


def bnb_matmul_case(W, dtype, blocksize):
    """matmul_4bit, as Linear4bit's forward calls it: on the CPU the tiled copy of the weight (cpu.pack_4bit)."""
    packed, state = F.quantize_4bit(W.to(dtype), blocksize=blocksize, quant_type="nf4", compress_statistics=True)
    return lambda a: bnb.matmul_4bit(a, packed.t(), state)


def bnb_linear(W, dtype, blocksize):
    """bnb's Linear4bit in eval mode over W (its own quantization), after a first no-grad call: on an AVX-512 CPU
    it holds the weight repacked in place (bnb/python/bnb/cpu_layout.py), where matmul_4bit on tensors keeps a
    tiled copy and, for bfloat16 batches past 128 rows, multiplies bitsandbytes' bytes instead."""
    N, K = W.shape
    layer = bnb.nn.Linear4bit(K, N, bias=False, compute_dtype=dtype, quant_type="nf4")
    layer.weight = bnb.nn.Params4bit(W.to(dtype), requires_grad=False, compress_statistics=True, quant_type="nf4",
                                     blocksize=blocksize, module=layer)
    layer = layer.to("cpu").eval()
    with torch.no_grad():
        layer(torch.randn(1, K).to(dtype))
    return layer


def int8_case(fn):
    """fn with knob cpu.int8_activations on for its call (opt-in: activations quantized to int8, less exact)."""
    def call(*args):
        with bnb.config.override(cpu__int8_activations=True):
            return fn(*args)
    return call


def real_bitsandbytes():
    """bitsandbytes itself, or None where it is not importable or is bnb's companion package (which would time bnb
    under the peer's name)."""
    try:
        import bitsandbytes
    except ImportError:
        return None
    return None if "+bnb" in getattr(bitsandbytes, "__version__", "") else bitsandbytes


def bitsandbytes_case(W, dtype, blocksize):
    """bitsandbytes' gemv_4bit on the same weight, or None where it is not importable or has no CPU kernel."""
    if real_bitsandbytes() is None:
        return None
    try:
        import bitsandbytes.functional as BF
        packed, state = BF.quantize_4bit(W.to(dtype), blocksize=blocksize, quant_type="nf4", compress_statistics=True)
        fn = lambda a: BF.gemv_4bit(a, packed.t(), state=state)  # noqa: E731
        fn(torch.randn(1, W.shape[1]).to(dtype))
        return fn
    except Exception:  # noqa: BLE001  (a peer that cannot run here is left out of the table, not an error)
        return None


def bitsandbytes_linear_case(W, dtype, blocksize):
    """bitsandbytes' Linear4bit in eval mode, as transformers runs it for inference: on an AVX512-BF16 CPU it repacks
    the weight into its CPU layout on the first call, and every batch size then takes its packed kernel. None where
    bitsandbytes is not importable or cannot run here."""
    bitsandbytes = real_bitsandbytes()
    if bitsandbytes is None:
        return None
    try:
        N, K = W.shape
        lin = bitsandbytes.nn.Linear4bit(K, N, bias=False, compute_dtype=dtype, compress_statistics=True,
                                         quant_type="nf4")
        lin.weight = bitsandbytes.nn.Params4bit(W.to(dtype), requires_grad=False, compress_statistics=True,
                                                quant_type="nf4", blocksize=blocksize)
        lin = lin.to("cpu").eval()

        def fn(a):
            with torch.inference_mode():
                return lin(a)

        fn(torch.randn(1, K).to(dtype))  # the repack
        return fn
    except Exception:  # noqa: BLE001  (a peer that cannot run here is left out of the table, not an error)
        return None


def int4pack_case(W, dtype, blocksize):
    """torch's int4 CPU kernel on W quantized to int4 with a scale and zero per group of `blocksize` (its layout)."""
    N, K = W.shape
    groups = W.reshape(N, K // blocksize, blocksize)
    lo, hi = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    q = ((groups - lo) / scale).round().clamp(0, 15).to(torch.int32).reshape(N, K)
    zero = lo + 8 * scale  # the kernel computes (q - 8) * scale + zero
    scales_zeros = torch.stack([scale.reshape(N, -1).t(), zero.reshape(N, -1).t()], dim=-1).to(dtype).contiguous()
    packed = torch._convert_weight_to_int4pack_for_cpu(q, 1)
    fn = lambda a: torch._weight_int4pack_mm_for_cpu(a, packed, blocksize, scales_zeros)  # noqa: E731
    try:
        fn(torch.randn(1, K).to(dtype))
    except RuntimeError:
        return None
    return fn


def shape_rows(shapes, dtype, blocksize, rounds, with_peers):
    """Times one token through each weight of `shapes` (summed, as a layer's decode step), per implementation:
    the weight's bytes, the limit (seconds to read them at the memory copy's speed, its fastest round) and a row
    (name, best seconds, median % of limit) each."""
    a = {K: torch.randn(1, K).to(dtype) for _, K in shapes}
    Ws = [torch.randn(N, K) * 0.02 for N, K in shapes]
    weight_bytes, ours = 0, []
    for W in Ws:
        nbytes, fn = bnb_case(W, dtype, blocksize)
        weight_bytes += nbytes
        ours.append((W.shape[1], fn))
    impls = [("bnb gemv_4bit", ours),
             ("bnb matmul_4bit (tiled)", [(W.shape[1], bnb_matmul_case(W, dtype, blocksize)) for W in Ws])]
    if bnb._C.gemm4_packed_int8_runs():  # a weight of its own: one just read by the row above would sit in L3
        impls.append(("bnb tiled, int8 A (opt-in)",
                      [(W.shape[1], int8_case(bnb_matmul_case(W, dtype, blocksize))) for W in Ws]))
    if with_peers:
        for name, make in (("bitsandbytes gemv_4bit", bitsandbytes_case),
                           ("bitsandbytes Linear4bit", bitsandbytes_linear_case),
                           ("torch int4pack_mm", int4pack_case)):
            fns = [make(W, dtype, blocksize) for W in Ws]
            if all(f is not None for f in fns):
                impls.append((name, [(W.shape[1], f) for W, f in zip(Ws, fns)]))
        dense = [W.to(dtype) for W in Ws]
        impls.append((f"F.linear {dtype_name(dtype)}",
                      [(W.shape[1], (lambda w: lambda x: torch.nn.functional.linear(x, w))(W)) for W in dense]))
    copy, moved = memory_copy()  # its 256 MB also push every weight out of the L3 between two calls of it
    fns = [copy, cache_cleaner()] + [(lambda fs: lambda: [f(a[K]) for K, f in fs])(fs) for _, fs in impls]
    times = round_seconds(fns, rounds)
    rows = []
    for (name, _), ts in zip(impls, times[2:]):
        ratios = sorted((weight_bytes / t) / (moved / c) for t, c in zip(ts, times[0]))
        rows.append((name, min(ts), 100 * ratios[len(ratios) // 2]))
    return weight_bytes, min(times[0]) * weight_bytes / moved, rows


def loop_rows(shapes, dtype, blocksize, rounds, with_peers, loop_bytes):
    """One token through the weights of `shapes` (a layer's decode step), each implementation in a loop of its own
    over copies of the weights that outgrow the L3, as a decode runs (and as tools/bench/ggml_peer.c times ggml):
    no other work between calls. In round_seconds' rotation each call instead follows other implementations, and
    the lines a copy or oneDNN's weight reorder left dirty are written back during its reads (4096x4096 one thread:
    ~400 us alone, ~600 after a copy). The limit: the codes' bytes at the speed of timing.memory_copy's best call."""
    nbytes = sum(N * K // 2 for N, K in shapes)
    copies = loop_bytes // nbytes + 2
    x = {K: torch.randn(1, K).to(dtype) for _, K in shapes}
    makes = [("bnb matmul_4bit (tiled)", bnb_matmul_case, False)]
    if bnb._C.gemm4_packed_int8_runs():
        makes.append(("bnb tiled, int8 A (opt-in)", bnb_matmul_case, True))
    if with_peers:
        makes.append(("bitsandbytes Linear4bit", bitsandbytes_linear_case, False))

    def best_of(calls):
        best = float("inf")
        for r in range((rounds + 1) * len(calls)):
            t0 = time.perf_counter()
            calls[r % len(calls)]()
            if r >= len(calls):  # the first pass warms caches of the code, the layouts and the thread pool
                best = min(best, time.perf_counter() - t0)
        return best

    copy, moved = memory_copy()
    limit = best_of([copy]) * nbytes / moved
    del copy
    rows = []
    for name, make, int8 in makes:
        layers = []
        for _ in range(copies):
            fns = [(K, make(torch.randn(N, K) * 0.02, dtype, blocksize)) for N, K in shapes]
            if any(f is None for _, f in fns):
                break
            layers.append((lambda fns: lambda: [f(x[K]) for K, f in fns])(fns))
        if len(layers) < copies:
            continue
        with torch.no_grad(), bnb.config.override(cpu__int8_activations=int8):
            rows.append((name, best_of(layers)))
    return nbytes, limit, rows


def batch_rows(N, K, batch, dtype, blocksize, rounds, with_peers):
    """A batch through one weight per implementation (bnb: matmul_4bit on the weight as tensors, which keeps a tiled
    copy, and Linear4bit, which repacks its weight in place): (name, best seconds) each, beside F.linear on the
    dense weight."""
    W = torch.randn(N, K) * 0.02
    x = torch.randn(batch, K).to(dtype)
    packed, state = F.quantize_4bit(W.to(dtype), blocksize=blocksize, quant_type="nf4", compress_statistics=True)
    impls = [("bnb matmul_4bit", lambda: bnb.matmul_4bit(x, packed.t(), state))]
    layer = bnb_linear(W, dtype, blocksize)
    if layer is not None:
        impls.append(("bnb Linear4bit (in place)", lambda: layer(x)))
    if bnb._C.gemm4_packed_int8_runs():  # a weight of its own, as above
        packed8, state8 = F.quantize_4bit(W.to(dtype), blocksize=blocksize, quant_type="nf4",
                                          compress_statistics=True)
        impls.append(("bnb tiled, int8 A (opt-in)", int8_case(lambda: bnb.matmul_4bit(x, packed8.t(), state8))))
    if with_peers:
        linear = bitsandbytes_linear_case(W, dtype, blocksize)
        if linear is not None:
            impls.append(("bitsandbytes Linear4bit", lambda: linear(x)))
    dense = W.to(dtype)
    impls.append((f"F.linear {dtype_name(dtype)}", lambda: torch.nn.functional.linear(x, dense)))
    with torch.no_grad():
        times = round_seconds([fn for _, fn in impls], rounds)
    return [(name, min(ts)) for (name, _), ts in zip(impls, times)]


def ggml_peer_table(binary, threads, rounds):
    """The table tools/bench/ggml_peer.c prints for `threads` threads, or a line saying why there is none."""
    try:
        done = subprocess.run([binary, str(threads), str(rounds)], capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"ggml peer {binary!r} did not run: {e}"
    if done.returncode != 0:
        return f"ggml peer {binary!r} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
    return done.stdout.rstrip()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", type=weight_shapes, default="4096x4096,14336x4096,4096x14336",
                    help="weights NxK, one table row each")
    ap.add_argument("--threads", default="1,2", help="thread counts, one table each")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--blocksize", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=15, help="rounds (timing.round_seconds)")
    ap.add_argument("--no-layer", action="store_true", help="leave out the Llama-3-8B layer row")
    ap.add_argument("--no-peers", action="store_true", help="bnb alone (bitsandbytes, torch left out)")
    ap.add_argument("--batches", default="16,128",
                    help="batch sizes of the batch table (weight: the first shape; empty: no table)")
    ap.add_argument("--loop", action="store_true",
                    help="one token: each implementation in a loop of its own over weights cycled past the L3 "
                         "(as a decode, and tools/bench/ggml_peer.c), instead of rounds alternating them")
    ap.add_argument("--loop-mb", type=int, default=96, help="--loop: MB of weights cycled through (above the L3)")
    ap.add_argument("--ggml-peer", metavar="BIN",
                    help="--loop: after bnb's table at each thread count, run this build of tools/bench/ggml_peer.c "
                         "(llama.cpp's kernels, built apart: see its header) on the default shapes, in the same run")
    ap.add_argument("--ggml-rounds", type=int, default=3, help="--ggml-peer: its rounds")
    args = ap.parse_args(argv)
    if not args.shapes:
        ap.error("--shapes names at least one weight (the batch table takes the first)")
    cases = [(f"{N}x{K}", [(N, K)]) for N, K in args.shapes]
    if not args.no_layer:
        cases.append(("Llama-3-8B layer, 7 linears", LLAMA3_8B_LAYER))
    saved = torch.get_num_threads()
    try:
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            print(f"{machine_line()}, NF4 blocksize {args.blocksize}, nested absmax, one token (1 x K)")
            head = f"{'weight':<30}{'A':<10}{'implementation':<26}{'us':>9}{'% of limit':>12}"
            print(head)
            print("-" * len(head))
            for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
                kernel = bnb._C.gemv4_kernel(str(dtype), args.shapes[0][1])
                for label, case_shapes in cases:
                    if args.loop:
                        nbytes, limit, rows = loop_rows(case_shapes, dtype, args.blocksize, args.repeat,
                                                        not args.no_peers, args.loop_mb << 20)
                        print(f"{label:<30}{dtype_name(dtype):<10}{'limit (copy, read only)':<26}"
                              f"{limit * 1e6:>9.0f}{100:>11}%")
                        for name, seconds in rows:
                            print(f"{'':<30}{'':<10}{name:<26}{seconds * 1e6:>9.0f}{100 * limit / seconds:>11.0f}%")
                        continue
                    nbytes, limit, rows = shape_rows(case_shapes, dtype, args.blocksize, args.repeat,
                                                     not args.no_peers)
                    print(f"{label:<30}{dtype_name(dtype):<10}{'limit (copy, read only)':<26}"
                          f"{limit * 1e6:>9.0f}{100:>11}%")
                    for name, seconds, pct in rows:
                        if name == "bnb gemv_4bit":
                            name = f"bnb ({kernel})"
                        print(f"{'':<30}{'':<10}{name:<26}{seconds * 1e6:>9.0f}{pct:>11.0f}%")
            if args.loop and args.ggml_peer:
                print(ggml_peer_table(args.ggml_peer, threads, args.ggml_rounds))
            if args.loop or not args.batches:
                print()
                continue
            N, K = args.shapes[0]
            print(f"\nbatches through {N}x{K}: matmul_4bit on tensors, Linear4bit (weight repacked in place), us")
            for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
                for batch in (int(b) for b in args.batches.split(",")):
                    for name, seconds in batch_rows(N, K, batch, dtype, args.blocksize, args.repeat,
                                                    not args.no_peers):
                        print(f"{'batch ' + str(batch):<30}{dtype_name(dtype):<10}{name:<26}{seconds * 1e6:>9.0f}")
            print()
    finally:
        torch.set_num_threads(saved)


if __name__ == "__main__":
    main()
