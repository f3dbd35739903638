"""bitsandbytes-compatible modules: 4-bit and LLM.int8() linear and embedding layers, StableEmbedding, and 4-bit
parametrization (bnb.nn.parametrize) of any parameter."""

from . import parametrize
from .modules import Embedding4bit, EmbeddingFP4, EmbeddingNF4, Linear4bit, LinearFP4, LinearNF4, Params4bit
from .modules8bit import Embedding, Embedding8bit, Int8Params, Linear8bitLt, OutlierAwareLinear, StableEmbedding

__all__ = ["Embedding", "Embedding4bit", "Embedding8bit", "EmbeddingFP4", "EmbeddingNF4", "Int8Params", "Linear4bit",
           "Linear8bitLt", "LinearFP4", "LinearNF4", "OutlierAwareLinear", "Params4bit", "StableEmbedding",
           "parametrize"]
