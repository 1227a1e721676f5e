"""The process environment a rank needs before CUDA initialises: its GPU pinned by UUID, NCCL's
variables, and, under MPS, the client environment of its planned service (re-checked first).

CUDA reads these once, when the driver initialises, so every rank entry calls this before its
first CUDA call: `unilab apply` for one rank, and each data-parallel rank process before
``torch.cuda.set_device``. Children (the collector, its physics workers) inherit them."""

from __future__ import annotations

import os

from unilab.plan.models import Plan
from unilab.run import mps_attach
from unilab.run.mps_attach import MpsAttachment


def prepare_rank_env(plan: Plan, rank: int) -> MpsAttachment | None:
    """Pin the rank's GPU (``CUDA_VISIBLE_DEVICES`` = its UUID, so it is ``cuda:0`` in every process
    of the rank), give NCCL the plan's variables (a value already in the environment is the user's
    and wins) and, when the plan shares the GPU through MPS, re-check the service and make this
    process and its children its clients. Returns the MPS attachment to confirm once CUDA runs."""
    rp = plan.ranks[rank]
    if rp.device == "cuda" and rp.gpu_uuid:
        os.environ["CUDA_VISIBLE_DEVICES"] = rp.gpu_uuid
    for var in plan.nccl_env:
        os.environ.setdefault(var.name, var.value)
    att = mps_attach.revalidate(plan, rank)
    if att is not None:
        mps_attach.apply_env(att, att.log_directory)
    return att
