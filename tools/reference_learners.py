"""Plain eager learners that `tools/bench_learner.py` times unilab's against: what a user would write
without unilab, in the CleanRL style (Huang et al. 2022): nn.Sequential MLPs, two separate Q
networks and their targets, torch.optim.Adam with its defaults, float32, no torch.compile.

They are not unilab's learners rewritten: they compute the same updates (SAC with a C51 critic,
FastSAC's sizes; FlashSAC as arXiv:2604.04539 and unilab.algos.flashsac.learner describe it) at the same
widths, batch, critic type and cadence, so a ratio of their update rates measures the
implementation, not the algorithm. Neither is used by unilab itself.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU, "elu": nn.ELU}


def mlp(d_in: int, hidden: tuple[int, ...], d_out: int, activation: str, layer_norm: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(d_in, h), *([nn.LayerNorm(h)] if layer_norm else []), ACTIVATIONS[activation]()]
        d_in = h
    return nn.Sequential(*layers, nn.Linear(d_in, d_out))


def project_c51(probs: torch.Tensor, values: torch.Tensor, v_min: float, v_max: float) -> torch.Tensor:
    """Bellemare et al. (2017): split each shifted atom's probability between its two neighbours."""
    k = probs.shape[-1]
    b = (values.clamp(v_min, v_max) - v_min) / ((v_max - v_min) / (k - 1))
    lower, upper = b.floor().long(), b.ceil().long()
    lower[(upper > 0) & (lower == upper)] -= 1
    upper[(lower < k - 1) & (lower == upper)] += 1
    out = torch.zeros_like(probs)
    out.scatter_add_(-1, lower, probs * (upper.float() - b))
    out.scatter_add_(-1, upper, probs * (b - lower.float()))
    return out


@torch.no_grad()
def soft_update(pairs: list[tuple[nn.Module, nn.Module]], tau: float) -> None:
    """CleanRL's target update: target <- tau * online + (1 - tau) * target."""
    for net, target_net in pairs:
        for p, tp in zip(net.parameters(), target_net.parameters(), strict=True):
            tp.data.copy_(tau * p.data + (1 - tau) * tp.data)


def squashed_sample(mean: torch.Tensor, log_std: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    std = log_std.exp()
    x = mean + std * torch.randn_like(mean)
    y = torch.tanh(x)
    logp = (-0.5 * ((x - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    return y, logp - torch.log(1 - y.pow(2) + 1e-6).sum(-1)


class ReferenceSac:
    """SAC with a C51 twin critic (FastSAC's options), as CleanRL's sac_continuous_action.py is written."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        actor_hidden: tuple[int, ...],
        critic_hidden: tuple[int, ...],
        activation: str,
        layer_norm: bool,
        num_atoms: int = 101,
        v_min: float = -20.0,
        v_max: float = 20.0,
        actor_update_every: int = 4,
        lr: float = 3e-4,
        gamma: float = 0.99,
        tau: float = 0.005,
    ) -> None:
        self.actor = mlp(obs_dim, actor_hidden, 2 * act_dim, activation, layer_norm)
        self.qf1 = mlp(obs_dim + act_dim, critic_hidden, num_atoms, activation, layer_norm)
        self.qf2 = mlp(obs_dim + act_dim, critic_hidden, num_atoms, activation, layer_norm)
        self.qf1_target, self.qf2_target = copy.deepcopy(self.qf1), copy.deepcopy(self.qf2)
        self.q_optimizer = torch.optim.Adam([*self.qf1.parameters(), *self.qf2.parameters()], lr=lr)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.a_optimizer = torch.optim.Adam([self.log_alpha], lr=lr)
        self.atoms = torch.linspace(v_min, v_max, num_atoms)
        self.v_min, self.v_max, self.gamma, self.tau = v_min, v_max, gamma, tau
        self.actor_update_every, self.target_entropy, self.step = actor_update_every, -act_dim, 0

    def get_action(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs).chunk(2, -1)
        return squashed_sample(mean, -5.0 + 3.5 * (torch.tanh(log_std) + 1.0))

    def q(self, net: nn.Module, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return net(torch.cat([obs, action], -1))

    def update(self, obs, action, reward, next_obs, discount) -> torch.Tensor:  # type: ignore[no-untyped-def]
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_logp = self.get_action(next_obs)
            p1 = F.softmax(self.q(self.qf1_target, next_obs, next_action), -1)
            p2 = F.softmax(self.q(self.qf2_target, next_obs, next_action), -1)
            pick = ((p1 * self.atoms).sum(-1) <= (p2 * self.atoms).sum(-1))[:, None]
            values = reward[:, None] + discount[:, None] * (self.atoms[None] - alpha * next_logp[:, None])
            target = project_c51(torch.where(pick, p1, p2), values, self.v_min, self.v_max)
        qf1_loss = -(target * F.log_softmax(self.q(self.qf1, obs, action), -1)).sum(-1).mean()
        qf2_loss = -(target * F.log_softmax(self.q(self.qf2, obs, action), -1)).sum(-1).mean()
        qf_loss = qf1_loss + qf2_loss
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()

        if self.step % self.actor_update_every == 0:
            pi, log_pi = self.get_action(obs)
            q1 = (F.softmax(self.q(self.qf1, obs, pi), -1) * self.atoms).sum(-1)
            q2 = (F.softmax(self.q(self.qf2, obs, pi), -1) * self.atoms).sum(-1)
            actor_loss = (alpha * log_pi - torch.min(q1, q2)).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            alpha_loss = (-self.log_alpha.exp() * (log_pi.detach() + self.target_entropy)).mean()
            self.a_optimizer.zero_grad()
            alpha_loss.backward()
            self.a_optimizer.step()

        soft_update([(self.qf1, self.qf1_target), (self.qf2, self.qf2_target)], self.tau)
        self.step += 1
        return qf_loss.detach()


class FlashNet(nn.Module):
    """One FlashSAC network: BatchNorm, bias-free embedding, inverted-residual blocks, RMSNorm, head."""

    def __init__(self, d_in: int, h: int, num_blocks: int, expansion: int, d_out: int) -> None:
        super().__init__()
        self.bn_in = nn.BatchNorm1d(d_in, momentum=0.01)
        self.embed = nn.Linear(d_in, h, bias=False)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Linear(h, h * expansion, bias=False),
                nn.BatchNorm1d(h * expansion, momentum=0.01),
                nn.ReLU(),
                nn.Linear(h * expansion, h, bias=False),
                nn.BatchNorm1d(h, momentum=0.01),
                nn.ReLU(),
            )
            for _ in range(num_blocks)
        )
        self.norm = nn.RMSNorm(h, eps=1e-6)
        self.head = nn.Linear(h, d_out)
        nn.init.zeros_(self.head.bias)
        self.project()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(self.bn_in(x))
        for block in self.blocks:
            x = x + block(x)
        return self.head(self.norm(x))

    @torch.no_grad()
    def project(self) -> None:
        """Weights back onto the unit sphere (per output unit); norm scales to sqrt(width)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.weight.copy_(F.normalize(m.weight, dim=-1))
            elif isinstance(m, nn.BatchNorm1d):
                scale = math.sqrt(m.num_features) / torch.sqrt(m.weight.square().sum() + m.bias.square().sum())
                m.weight.mul_(scale)
                m.bias.mul_(scale)
            elif isinstance(m, nn.RMSNorm):
                m.weight.mul_(math.sqrt(m.weight.numel()) / m.weight.norm())


class ReferenceFlashSac:
    """FlashSAC's update (cross-batch critic, actor first every `actor_update_every`, projected weights)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        width: int = 256,
        num_blocks: int = 2,
        expansion: int = 4,
        num_atoms: int = 101,
        v_min: float = -5.0,
        v_max: float = 5.0,
        actor_update_every: int = 2,
        lr: float = 3e-4,
        tau: float = 0.01,
        target_action_std: float = 0.15,
    ) -> None:
        self.actor = FlashNet(obs_dim, width, num_blocks, expansion, 2 * act_dim)
        self.qf1 = FlashNet(obs_dim + act_dim, width, num_blocks, expansion, num_atoms)
        self.qf2 = FlashNet(obs_dim + act_dim, width, num_blocks, expansion, num_atoms)
        self.qf1_target, self.qf2_target = copy.deepcopy(self.qf1), copy.deepcopy(self.qf2)
        self.q_optimizer = torch.optim.Adam([*self.qf1.parameters(), *self.qf2.parameters()], lr=lr)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.log_alpha = torch.full((1,), math.log(0.01), requires_grad=True)
        self.a_optimizer = torch.optim.Adam([self.log_alpha], lr=lr)
        self.atoms = torch.linspace(v_min, v_max, num_atoms)
        self.v_min, self.v_max, self.tau = v_min, v_max, tau
        self.actor_update_every, self.step = actor_update_every, 0
        self.target_entropy = 0.5 * act_dim * math.log(2 * math.pi * math.e * target_action_std**2)

    def get_action(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs).chunk(2, -1)
        return squashed_sample(mean, -10.0 + 6.0 * (torch.tanh(log_std) + 1.0))

    def update(self, obs, action, reward, next_obs, discount) -> torch.Tensor:  # type: ignore[no-untyped-def]
        b = obs.shape[0]
        alpha = self.log_alpha.exp().detach()
        if self.step % self.actor_update_every == 0:
            self.actor.train()
            self.qf1.eval()
            self.qf2.eval()
            mean, log_std = self.actor(torch.cat([obs, next_obs])).chunk(2, -1)
            pi, log_pi = squashed_sample(mean[:b], (-10.0 + 6.0 * (torch.tanh(log_std) + 1.0))[:b])
            x = torch.cat([obs, pi], -1)
            q1 = (F.softmax(self.qf1(x), -1) * self.atoms).sum(-1)
            q2 = (F.softmax(self.qf2(x), -1) * self.atoms).sum(-1)
            actor_loss = (alpha * log_pi - torch.min(q1, q2)).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            self.actor.project()
            alpha_loss = self.log_alpha.exp() * (-log_pi.detach().mean() - self.target_entropy)
            self.a_optimizer.zero_grad()
            alpha_loss.backward()
            self.a_optimizer.step()

        self.actor.eval()
        for net in (self.qf1, self.qf2, self.qf1_target, self.qf2_target):
            net.train()
        with torch.no_grad():
            next_action, next_logp = self.get_action(next_obs)
            x_all = torch.cat([torch.cat([obs, action], -1), torch.cat([next_obs, next_action], -1)])
            p1 = F.softmax(self.qf1_target(x_all)[b:], -1)
            p2 = F.softmax(self.qf2_target(x_all)[b:], -1)
            pick = ((p1 * self.atoms).sum(-1) <= (p2 * self.atoms).sum(-1))[:, None]
            values = reward[:, None] + discount[:, None] * (self.atoms[None] - alpha * next_logp[:, None])
            target = project_c51(torch.where(pick, p1, p2), values, self.v_min, self.v_max)
        qf1_loss = -(target * F.log_softmax(self.qf1(x_all)[:b], -1)).sum(-1).mean()
        qf2_loss = -(target * F.log_softmax(self.qf2(x_all)[:b], -1)).sum(-1).mean()
        qf_loss = 0.5 * (qf1_loss + qf2_loss)
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        self.qf1.project()
        self.qf2.project()
        soft_update([(self.qf1, self.qf1_target), (self.qf2, self.qf2_target)], self.tau)
        self.step += 1
        return qf_loss.detach()
