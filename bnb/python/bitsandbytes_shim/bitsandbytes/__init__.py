"""bitsandbytes, forwarded to bnb: bnb's companion distribution, so that code written for bitsandbytes
(transformers' BitsAndBytesConfig, peft's QLoRA, accelerate, Trainer's bitsandbytes optimizers) runs on bnb unchanged.

Built from bnb's repository (bazel build //bnb/python:bitsandbytes_wheel) and installed on request
(tools/install_shim.sh). Its version, <bitsandbytes API>+bnb.<bnb version> (0.50.0+bnb.0.1.0), passes version checks
against bitsandbytes and says it is bnb. What it forwards, and what raises NotImplementedError, is the table in
_companion.py. It refuses to load where another bitsandbytes is importable (_conflict.py).
"""

from ._conflict import refuse_beside_another

refuse_beside_another(__path__[0])  # before anything is imported or registered

try:
    import bnb  # noqa: E402,F401
    bnb.__bitsandbytes_version__
except (ImportError, AttributeError) as e:  # none, or PyPI's unrelated "bnb"
    raise ImportError(f"bitsandbytes at {__path__[0]} is bnb's companion and forwards to bnb, the k-bit quantization "
                      f"library built from the same repository, which is not importable here: {e}") from e

from . import _aliases, _companion  # noqa: E402

__version__ = _companion.version()
_aliases.install()
for _name in _companion.TOP_LEVEL:
    if _name not in _companion.LAZY:
        globals()[_name] = _companion.resolve_top_level(_name)
del _name

__all__ = sorted(_companion.TOP_LEVEL) + ["__version__"]


def __getattr__(name: str):
    value = _companion.resolve_top_level(name)  # bitsandbytes.optim on first use, or the error naming the feature
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_companion.TOP_LEVEL))
