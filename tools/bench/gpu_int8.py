"""GPU benchmark for LLM.int8() against issue 24's H100 goals, beside the peers in the same run:
- the int8 product at 8192^3 (int8_linear_matmul) against torch._int_mm (goal >= 0.97x);
- Linear8bitLt's forward, 16 x 8192 by an 8192^2 weight, thresholds 0 and 6, against float16 nn.Linear (>= 0.9x;
  bitsandbytes: 0.23x);
- one token through the 7 linears of a Llama-3-8B layer (q, k, v, o, gate, up, down), 32 times (224 layers), as
  Linear8bitLt at threshold 6 against bfloat16 nn.Linear, under no_grad as transformers' generate() (>= 1.5x
  faster; bitsandbytes: 0.10x). The 7 weights are reused by the 32 layers: 218 MB of int8 (436 MB of bf16), far
  beyond the 50 MB L2, so every layer reads its weight from memory as a real model's would.
- the small-batch int8 product (int8_scaled_mm at 1 and 16 rows: one pass over the weight) against the weight's
  read at copy speed and bfloat16 F.linear, in CUDA graphs (no launch overhead), the weights rotating through
  twice the L2;
GPU time is CUDA-event time over back-to-back calls; the input has four outlier columns (x 8). Last, where one
token's call is slow, why: torch.profiler over one Linear8bitLt call per threshold (host time by op, the kernels,
and the calls that wait for the device).
Run: python tools/bench/gpu_int8.py
"""

import itertools

import torch

import gpu_timing

OUTLIER_COLUMNS = (10, 400, 2000, 3000)
LLAMA3_8B_LAYER = ((4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096),
                   (4096, 14336))  # (N, K) of q, k, v, o, gate, up, down


def linears(shapes, threshold, dtype):
    """(Linear8bitLt, nn.Linear) pairs on the GPU with the same weights."""
    import bnb
    out = []
    for n, k in shapes:
        dense = torch.nn.Linear(k, n, bias=False).to("cuda", dtype)
        layer = bnb.nn.Linear8bitLt(k, n, bias=False, has_fp16_weights=False, threshold=threshold)
        layer.load_state_dict(dense.state_dict())
        out.append((layer.cuda(), dense))  # .cuda() quantizes the weight
    return out


def activations(m, k, dtype):
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    x[:, [c for c in OUTLIER_COLUMNS if c < k]] *= 8
    return x


# Runtime and driver calls after which the host waits for the device (a synchronizing copy or an explicit wait).
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaMemcpyAsync", "cuStreamSynchronize",
         "cuCtxSynchronize", "cuMemcpyDtoH", "cudaEventSynchronize")


def trace(fn, label: str, rows: int = 8) -> None:
    """One call of fn (after a warm-up) under torch.profiler: the ops by host time, the kernels launched, and the
    calls that wait for the device."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    events = prof.key_averages()
    waits = sum(e.count for e in events if e.key.startswith(SYNCS))
    kernels = sum(e.count for e in events if getattr(e, "device_type", None) is not None
                  and str(e.device_type).endswith("CUDA"))
    total = sum(e.self_cpu_time_total for e in events)
    print(f"{label}: host {total:.0f} us in all, {kernels} kernel launches, {waits} waits for the device")
    for e in sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]:
        print(f"  {e.key[:60]:60s} x{e.count:<3d} self {e.self_cpu_time_total:8.1f} us")


def small_batches(copy_gbs: float) -> None:
    """int8_scaled_mm at 1 and 16 rows (bfloat16 out) against the floor and bfloat16 F.linear."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"{'int8_scaled_mm, rows x K by N x K':<36}{'bnb GPU us':>11}{'floor us':>10}{'F.linear us':>13}"
          f"{'speed-up':>10}")
    for n, k in ((8192, 8192), (28672, 8192), (8192, 28672)):
        g = torch.Generator(device="cuda").manual_seed(n + k)
        copies = -(-2 * l2 // (n * k))
        weights = [torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8, generator=g)
                   for _ in range(copies)]
        scales = torch.rand(n, device="cuda") + 0.5
        dense = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(-(-2 * l2 // (2 * n * k)))]
        for m in (1, 16):
            a = torch.randint(-127, 128, (m, k), device="cuda", dtype=torch.int8, generator=g)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            sa = torch.rand(m, device="cuda") + 0.5
            turn, turn_dense = itertools.cycle(weights), itertools.cycle(dense)
            ours = gpu_timing.graph_us(
                lambda: torch.ops.bnb.int8_scaled_mm(a, next(turn), sa, scales, None, torch.bfloat16), 20)
            theirs = gpu_timing.graph_us(lambda: torch.nn.functional.linear(x, next(turn_dense)), 20)
            floor = n * k / copy_gbs / 1e3
            print(f"{f'{m} x {k} by {n} x {k}':<36}{ours:>11.1f}{floor:>10.1f}{theirs:>13.1f}{theirs / ours:>9.2f}x")
        del weights, dense


def copy_gbs() -> float:
    """A device-to-device copy's bandwidth (bytes read plus written), GB/s."""
    src = torch.empty(256 << 20, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    return 2 * src.numel() / gpu_timing.events_us(lambda: dst.copy_(src), 20) / 1e3


def main(argv=None):
    if not torch.cuda.is_available():
        print("no CUDA device: the GPU int8 benchmark is skipped")
        return
    import bnb
    print(f"bnb {bnb.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    g = torch.Generator(device="cuda").manual_seed(0)
    A = torch.randint(-127, 128, (8192, 8192), device="cuda", dtype=torch.int8, generator=g)
    B = torch.randint(-127, 128, (8192, 8192), device="cuda", dtype=torch.int8, generator=g)
    out = torch.empty(8192, 8192, device="cuda", dtype=torch.int32)
    ours = gpu_timing.events_us(lambda: torch.ops.bnb.int8_linear_matmul.out(A, B, out=out), 20)
    theirs = gpu_timing.events_us(lambda: torch._int_mm(A, B.t()), 20)
    tops = 2 * 8192**3 / 1e12
    print(f"int8 product 8192^3: bnb {ours:.0f} us ({tops / ours * 1e6:.0f} TOP/s), torch._int_mm {theirs:.0f} us: "
          f"{theirs / ours:.2f}x (goal >= 0.97x)")
    del A, B, out

    with torch.inference_mode():
        x = activations(16, 8192, torch.float16)
        rows = []
        for threshold in (0.0, 6.0):
            layer, dense = linears([(8192, 8192)], threshold, torch.float16)[0]
            t = gpu_timing.events_us(lambda: layer(x), 50)
            t16 = gpu_timing.events_us(lambda: dense(x), 50)
            rows.append(f"threshold {threshold:g}: {t:.0f} us, fp16 nn.Linear {t16:.0f} us: {t16 / t:.2f}x")
        print("Linear8bitLt forward 16x8192 by 8192^2: " + "; ".join(rows) + " (goal >= 0.9x)")

        small_batches(copy_gbs())

        layer_pairs = linears(LLAMA3_8B_LAYER, 6.0, torch.bfloat16)
        xs = [activations(1, k, torch.bfloat16) for _, k in LLAMA3_8B_LAYER]

        def decode(which):
            # Under no_grad, as transformers' generate() runs: outside inference mode the outlier columns keep a
            # version, so int8_mixed_scaled_mm skips reading their bounds (bnb/ops/int8/checks.cc).
            with torch.inference_mode(False), torch.no_grad():
                for _ in range(32):
                    for (layer, dense), xi in zip(layer_pairs, xs):
                        (layer if which == 0 else dense)(xi)

        t8 = gpu_timing.events_us(lambda: decode(0), 5)
        t16 = gpu_timing.events_us(lambda: decode(1), 5)
        print(f"one token through 224 Llama-3-8B-shaped layers: Linear8bitLt {t8 / 1e3:.2f} ms, bf16 nn.Linear "
              f"{t16 / 1e3:.2f} ms: {t16 / t8:.2f}x (goal >= 1.5x)")
        layer, _ = layer_pairs[0]
        for threshold in (6.0, 0.0):
            layer.state.threshold = threshold
            trace(lambda: layer(xs[0]), f"one token's q projection (1 x 4096 by 4096^2), threshold {threshold:g}")
        layer.state.threshold = 6.0


if __name__ == "__main__":
    main()
