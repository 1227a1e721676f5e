"""Rules on the run's own inputs and records: the checkpoint it starts from, its W&B mirror."""

from __future__ import annotations

import json

from unilab.algos.registry import algo_def
from unilab.errors import Diagnostic, UnilabError
from unilab.extras import install_command
from unilab.plan.context import Context
from unilab.plan.rules.registry import Rule, rule


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


@rule(
    "run.init-from",
    "run.init_from",
    "The checkpoint to start from is a checkpoint of a unilab run directory with the sha256 its run recorded, "
    "and that run trained the same task with the same algorithm, network shape (hidden widths, critic kind "
    "and support, FlashSAC's blocks and reward scaling, observation normalization) and `algo.alpha_init` "
    "(PPO: `algo.init_noise_std`), which the loaded temperature (noise) replaces.",
)
def run_init_from(r: Rule, ctx: Context) -> list[Diagnostic]:
    src = ctx.init_from
    if src is None:
        return []
    if isinstance(src, UnilabError):
        cond = src.summary.removeprefix("run.init_from: ") + (f" ({src.detail})" if src.detail else "")
        return [r.diag(cond, src.fix)]
    theirs, ours = src.plan, ctx.spec
    where = f"the checkpoint's run ({src.checkpoint.parent.parent.name})"
    without = "or start without run.init_from"
    if theirs.task.name != ours.task.name:
        return [
            r.diag(
                f"{where} trained {theirs.task.name}, this spec's task is {ours.task.name}: their observations differ",
                f'set task.name = "{theirs.task.name}", {without}',
                "task.name",
            )
        ]
    if theirs.algo.name != ours.algo.name:
        return [
            r.diag(
                f"{where} trained with {theirs.algo.name}, this spec with {ours.algo.name}",
                f'set algo = {{name = "{theirs.algo.name}"}} with that run\'s network keys, {without}',
                "algo.name",
            )
        ]
    out = []
    # Learned, then loaded: a different starting value here could not take effect.
    d = algo_def(ours.algo)
    carried = d.carried_key
    mine, saved = (getattr(ours.algo, carried), getattr(theirs.algo, carried)) if carried else (None, None)
    if carried is not None and mine != saved:
        learned = d.carried_what
        out.append(
            r.diag(
                f"algo.{carried} is {_toml(mine)} here, {_toml(saved)} in {where}: a run started from its checkpoint "
                f"continues with the {learned} it learned",
                (
                    f"remove algo.{carried} (its default, {_toml(saved)}, is that run's)"
                    if type(ours.algo).model_fields[carried].default == saved
                    else f"set algo.{carried} = {_toml(saved)}"
                )
                + f", {without}",
                f"algo.{carried}",
            )
        )
    mine_p = getattr(ours.task, "privileged_observations", None)
    saved_p = getattr(theirs.task, "privileged_observations", None)
    if (mine_p or ()) != (saved_p or ()):
        # The actor's input is the observation less these terms: another set does not fit its first layer.
        out.append(
            r.diag(
                f"task.privileged_observations is {json.dumps(list(mine_p or ()))} here, "
                f"{json.dumps(list(saved_p or ()))} in {where}: the saved actor reads other observation columns",
                f"set task.privileged_observations = {json.dumps(list(saved_p or ()))}, {without}",
                "task.privileged_observations",
            )
        )
    for key in d.network_keys(ours.algo):
        mine, saved = getattr(ours.algo, key), getattr(theirs.algo, key)
        if mine != saved:
            out.append(
                r.diag(
                    f"algo.{key} is {_toml(mine)} here, {_toml(saved)} in {where}: the saved networks do not fit",
                    f"set algo.{key} = {_toml(saved)}, {without}",
                    f"algo.{key}",
                )
            )
    return out


@rule(
    "run.wandb",
    "run.wandb",
    "A W&B mirror (`[run.wandb]`) needs the `wandb` extra installed on the host.",
)
def run_wandb(r: Rule, ctx: Context) -> list[Diagnostic]:
    if ctx.spec.run.wandb is None or ctx.facts.packages.wandb is not None:
        return []
    return [
        r.diag(
            "wandb is not installed on the host",
            f"install it there with {install_command('wandb')}, or remove [run.wandb]",
        )
    ]
