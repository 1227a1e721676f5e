"""unilab: a declarative training runtime for humanoid reinforcement learning."""

__version__ = "0.1.0"
