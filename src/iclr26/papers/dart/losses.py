"""DART (card 09) method core: instance-level IOT (m-LTM, Luong et al. 2024), the
feature-level unbalanced Wasserstein term with a detached POT plan, reliability-aware marginals."""
from __future__ import annotations

import ot
import torch


def sinkhorn_log(a, b, C, eps, iters):
    """Entropic OT plan in the log domain (differentiable in C)."""
    f = torch.zeros_like(a)
    g = torch.zeros_like(b)
    la, lb = torch.log(a), torch.log(b)
    for _ in range(iters):
        f = eps * (la - torch.logsumexp((g[None, :] - C) / eps, dim=1))
        g = eps * (lb - torch.logsumexp((f[:, None] - C) / eps, dim=0))
    return torch.exp((f[:, None] + g[None, :] - C) / eps)


def iot_loss(U, V, eps=0.05, iters=10):
    """IOT in the style of m-LTM's simpler OT loss: squared-Euclidean cost / max, Sinkhorn plan,
    -mean log(k * Pi_ii) (= KL(diag / k || Pi), m-LTM's `-sum pi_hat log pi`). Not m-LTM's full method:
    no learned Mahalanobis metric, no partial OT for noisy pairs. The max is detached (m-LTM's is
    not): a small difference in the gradient."""
    k = len(U)
    C = torch.cdist(U, V) ** 2
    C = C / C.max().detach()
    a = torch.full((k,), 1.0 / k, device=U.device)
    pi = sinkhorn_log(a, a, C, eps, iters)
    return -torch.log(pi.diagonal() * k + 1e-12).mean()


def feature_cost(U, V):
    """C^F_ij = ||U[:, i] - V[:, j]||_2 (channels as objects over the batch): d x d."""
    return torch.cdist(U.T, V.T)


def uwd_loss(U, V, marginal, eps=0.05, tau=1.0, iters=100):
    """<C^F, P>, P = unbalanced Sinkhorn (KL marginals, tau) solved by POT on CPU and detached."""
    C = feature_cost(U, V)
    m = marginal.detach().double().cpu().numpy()
    P = ot.unbalanced.sinkhorn_unbalanced(m, m, C.detach().double().cpu().numpy(), eps, tau, numItermax=iters)
    return (C * torch.as_tensor(P, dtype=C.dtype, device=C.device)).sum()


class RAM:
    """Reliability-aware marginals: r_j = sigmoid(corr_j - z(var_j) - z(kurt_j)), EMA over batches
    (beta), marginal r / sum r. var / kurt: mean of the two modalities, z-scored across channels
    (card 09's choice; the paper's normalisation is not known). The EMA smooths r itself, not the
    variance statistic (the paper's ablation names an "EMA-variance")."""

    def __init__(self, d, beta=0.9):
        self.beta, self.r = beta, torch.full((d,), 0.5)

    @torch.no_grad()
    def update(self, U, V):
        zu, zv = (U - U.mean(0)) / (U.std(0) + 1e-6), (V - V.mean(0)) / (V.std(0) + 1e-6)
        corr = (zu * zv).mean(0)
        var = 0.5 * (U.var(0) + V.var(0))
        kurt = 0.5 * ((zu ** 4).mean(0) + (zv ** 4).mean(0))

        def z(x):
            return (x - x.mean()) / (x.std() + 1e-6)

        r = torch.sigmoid(corr - z(var) - z(kurt))
        self.r = self.beta * self.r.to(r.device) + (1 - self.beta) * r
        return self.r / self.r.sum()
