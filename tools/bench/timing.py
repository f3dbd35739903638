"""Helpers shared by the CPU benchmarks: timing, the machine line, and the table of throughput beside a copy."""

import time

import torch

import bnb


def best_seconds(fn, repeat: int) -> float:
    """The fastest of `repeat` timed calls of fn, after one untimed warm-up (page faults, thread-pool start)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def machine_line() -> str:
    return (f"bnb {bnb.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
            f"ISA {bnb._C.cpu_isa()}")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def copy_row(x: torch.Tensor, repeat: int):
    """The table's baseline row for x: a plain copy into an existing tensor, as (case, seconds, bytes moved)."""
    y = torch.empty_like(x)
    return f"copy {dtype_name(x.dtype)}", best_seconds(lambda: y.copy_(x), repeat), 2 * x.numel() * x.element_size()


def print_bandwidth_header(width: int) -> None:
    head = f"{'case':<{width}}{'ms':>9}{'GB/s':>9}{'% of copy':>11}"
    print(head)
    print("-" * len(head))


def print_bandwidth_rows(rows, width: int) -> None:
    """Rows of (case, seconds, bytes read plus written), the first one copy_row's: throughput counts the same
    bytes as the copy's, so "% of copy" compares like with like."""
    copy_gbs = rows[0][2] / rows[0][1] / 1e9
    for case, t, nbytes in rows:
        gbs = nbytes / t / 1e9
        print(f"{case:<{width}}{t * 1e3:>9.2f}{gbs:>9.2f}{100 * gbs / copy_gbs:>10.0f}%")
