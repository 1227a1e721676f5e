"""Data-parallel learner support: gradient averaging with a validity sentinel, buffer averaging, replica
broadcast and digest."""

from unilab.dist.buffer_sync import BufferSync
from unilab.dist.grad_sync import DEFAULT_BUCKET_BYTES, GradSync, SyncCounters, WireDtype
from unilab.dist.replicas import broadcast_parameters, param_digest

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "BufferSync",
    "GradSync",
    "SyncCounters",
    "WireDtype",
    "broadcast_parameters",
    "param_digest",
]
