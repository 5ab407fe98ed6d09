"""credo: credit assignment for reinforcement learning with verifiable rewards (RLVR) on language models."""

from credo.batch import RolloutBatch
from credo.losses import LossOutput, aggregate
from credo.methods import METHODS, Method, get_method

__version__ = "0.1.0"

__all__ = ["METHODS", "LossOutput", "Method", "RolloutBatch", "__version__", "aggregate", "get_method"]
