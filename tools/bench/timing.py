"""Timing helpers shared by the CPU benchmarks."""

import time


def best_seconds(fn, repeat: int) -> float:
    """The fastest of `repeat` timed calls of fn, after one untimed warm-up (page faults, thread-pool start)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
