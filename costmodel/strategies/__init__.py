"""Decoding strategies. Each maps a :class:`~costmodel.strategies.common.Ctx` to an Outcome."""

from .autoregressive import autoregressive
from .shared_prefix import shared_prefix
from .speculative import speculative
from .tree import tree

STRATEGY_FUNCS = {"autoregressive": autoregressive, "speculative": speculative, "tree": tree,
                  "shared_prefix": shared_prefix}
