"""The CUDA kernel cache: statistics, and the disk cache behind `python -m bnb cache list | clear | warm`."""

from __future__ import annotations

import os
import sys
from typing import Any

from . import _C


def stats() -> dict[str, Any]:
    """This process's kernel cache counters: memory_hits, disk_hits, compiles, compile_failures, compile_ms,
    disk_load_ms."""
    return _C.jit_stats()


def reset_stats() -> None:
    _C.jit_reset_stats()


def cache_dir() -> str:
    """The disk cache directory in use ("" when the disk cache is off or unusable)."""
    return _C.cache_dir()


def cache_list() -> list[tuple[str, int, int]]:
    """(file name, bytes, mtime) of every cached kernel."""
    return _C.cache_list()


def cache_clear() -> int:
    """Removes every cached kernel; returns how many files went."""
    return _C.cache_clear()


def cache_warm(arch: str, progress: bool = True) -> int:
    """Compiles every kernel bnb has for `arch` ("sm_90") into the disk cache, with no GPU needed (NVRTC only),
    so that a later process, or a machine the cache directory is shipped to, compiles nothing."""
    def report(done: int, total: int, name: str) -> None:
        if not sys.stderr.isatty():  # a log file gets no progress bar (and warnings are not glued onto one)
            return
        width = 30
        filled = width * done // total
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {name[:60]:<60}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return _C.cache_warm(arch, report if progress else None)


def wheel_nvrtc_path() -> str:
    """The nvidia-cuda-nvrtc wheel's libnvrtc (torch's CUDA builds depend on it), or "" when it is not installed.
    A file-system look-up only: no library is opened."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for cu, so in (("cu13", "libnvrtc.so.13"), ("cuda_nvrtc", "libnvrtc.so.12"), ("cu12", "libnvrtc.so.12")):
            path = os.path.join(root, cu, "lib", so)
            if os.path.exists(path):
                return path
    return ""


def _locate_nvrtc() -> None:
    """Offers wheel_nvrtc_path() as the place to find NVRTC when the cuda.nvrtc_path knob is empty, below every
    config layer (so it neither overrides a config file's path nor shows up as one)."""
    path = wheel_nvrtc_path()
    if path:
        _C.set_fallback_nvrtc_path(path)
