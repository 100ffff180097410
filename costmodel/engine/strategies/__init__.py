"""Decoding strategies. Each maps a :class:`~costmodel.engine.strategies.common.Ctx` to an Outcome."""

from costmodel.engine.strategies.autoregressive import autoregressive
from costmodel.engine.strategies.shared_prefix import shared_prefix
from costmodel.engine.strategies.speculative import speculative
from costmodel.engine.strategies.tree import tree

STRATEGY_FUNCS = {"autoregressive": autoregressive, "speculative": speculative, "tree": tree,
                  "shared_prefix": shared_prefix}
