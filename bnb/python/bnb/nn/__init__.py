"""bitsandbytes-compatible modules: 4-bit linear and embedding layers."""

from .modules import Embedding4bit, EmbeddingFP4, EmbeddingNF4, Linear4bit, LinearFP4, LinearNF4, Params4bit

__all__ = ["Embedding4bit", "EmbeddingFP4", "EmbeddingNF4", "Linear4bit", "LinearFP4", "LinearNF4", "Params4bit"]
