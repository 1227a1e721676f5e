"""Off-policy learners, each readable in one module; pure torch, device-agnostic, no collector imports.

- `normalizer`: running mean/std observation normalizer (collector inference and learner alike);
- `replay`: device replay ring with n-step returns, and the `Batch` a learner consumes;
- `sac`: SAC with FastSAC's options (C51 critic, LayerNorm, delayed actor);
- `flashsac`: FlashSAC (arXiv:2604.04539);
- `optim`, `categorical`, `squashed_gaussian`, `reward_scale`: the pieces they share.

Both learners offer `act(obs_normalized, deterministic=False)`, `update(batch) -> dict[str, Tensor]`,
`observe_rewards(reward, terminated, truncated)`, `optim_groups()`, per-optimizer `*_grads` /
`*_step(ok)` pairs and `state_dict()` / `load_state_dict()`.
"""
