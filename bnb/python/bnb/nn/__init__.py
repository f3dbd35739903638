"""bitsandbytes-compatible modules: 4-bit linear and embedding layers, and 4-bit parametrization (bnb.nn.parametrize)
of any parameter."""

from . import parametrize
from .modules import Embedding4bit, EmbeddingFP4, EmbeddingNF4, Linear4bit, LinearFP4, LinearNF4, Params4bit

__all__ = ["Embedding4bit", "EmbeddingFP4", "EmbeddingNF4", "Linear4bit", "LinearFP4", "LinearNF4", "Params4bit",
           "parametrize"]
