"""The detectors (card 2.3): a scikit-learn random forest on graph-level vectors and a GCN
(torch-geometric GCNConv) on node features with a mean + sum readout, for one binary task.

A seed is one 70/15/15 split by focal paper (both graphs of a focal paper on the same side) and one
classifier initialisation. The RF is fit on the training graphs; the GCN trains full-batch with Adam
and reports the test accuracy at the epoch of best validation accuracy.
"""
from __future__ import annotations

import numpy as np

FEATURES = ("struct", "struct_nostar", "embed", "random_vec", "random_vec_fresh", "meta")


def split(pairs: np.ndarray, seed: int, fractions=(0.7, 0.15)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Graph indices of train / validation / test, split by focal paper."""
    focal = np.unique(pairs)
    rng = np.random.default_rng(seed)
    rng.shuffle(focal)
    a, b = int(round(fractions[0] * len(focal))), int(round((fractions[0] + fractions[1]) * len(focal)))
    side = np.empty(pairs.max() + 1, int)
    side[focal[:a]], side[focal[a:b]], side[focal[b:]] = 0, 1, 2
    where = side[pairs]
    return np.flatnonzero(where == 0), np.flatnonzero(where == 1), np.flatnonzero(where == 2)


def paper_vectors(ids: np.ndarray, dim: int, salt: int = 7) -> np.ndarray:
    """A fixed random vector per paper, seeded by its PaperID: an "embedding" with no content that
    is the same wherever the paper appears (identity, and so popularity, can still leak)."""
    unique, inverse = np.unique(np.asarray(ids, np.int64), return_inverse=True)
    table = np.stack([np.random.default_rng([int(i), salt]).normal(size=dim) for i in unique]) if len(unique) \
        else np.zeros((0, dim))
    return table[inverse].astype(np.float32)


def node_matrix(task: dict, kind: str, emb: np.ndarray, emb_row: dict, seed: int,
                meta: np.ndarray | None = None) -> np.ndarray:
    """Node features of a task: structural (5; with or without the star edges), the node's text
    embedding, random vectors of the embedding's size (the negative control: one fixed vector per
    PaperID, or fresh draws per node occurrence), or the node's metadata (log(1 + citations), year)."""
    if kind in ("struct", "struct_nostar"):
        return task[kind].astype(np.float32)
    if kind == "embed":
        return emb[[emb_row[int(i)] for i in task["node_ids"]]]
    if kind == "random_vec":
        return paper_vectors(task["node_ids"], emb.shape[1])
    if kind == "random_vec_fresh":
        return np.random.default_rng([seed, 7]).normal(size=(len(task["node_ids"]), emb.shape[1])).astype(np.float32)
    if kind == "meta":
        return meta[[emb_row[int(i)] for i in task["node_ids"]]].astype(np.float32)
    raise ValueError(kind)


def graph_vectors(task: dict, kind: str, x: np.ndarray) -> np.ndarray:
    """RF inputs: structural aggregates, the mean and median of the node metadata, or the sum of
    node vectors per graph."""
    if kind == "struct":
        return task["agg"]
    if kind == "struct_nostar":
        return task["agg_nostar"]
    if kind == "meta":
        parts = np.split(x, task["offsets"][1:-1])
        return np.stack([np.concatenate([p.mean(0), np.median(p, 0)]) for p in parts])
    return np.add.reduceat(x, task["offsets"][:-1], axis=0)


def accuracy_f1(y: np.ndarray, pred: np.ndarray) -> dict:
    from sklearn.metrics import accuracy_score, f1_score

    return {"accuracy": float(accuracy_score(y, pred)), "f1": float(f1_score(y, pred, zero_division=0))}


def random_forest(x: np.ndarray, y: np.ndarray, parts, cfg: dict, seed: int) -> dict:
    from sklearn.ensemble import RandomForestClassifier

    train, _, test = parts
    rf = RandomForestClassifier(n_estimators=cfg["trees"], random_state=seed, n_jobs=1)
    rf.fit(x[train], y[train])
    return accuracy_f1(y[test], rf.predict(x[test]))


def _batch(task: dict, x: np.ndarray):
    """Every graph of the task as one disjoint union, torch-geometric's batch layout (x, edge_index,
    batch), built from the flat arrays directly. Message passing stays within a graph, so the test
    graphs never inform training: only the training graphs enter the loss."""
    import warnings
    from types import SimpleNamespace

    import torch
    from torch_geometric.utils import to_torch_csr_tensor

    pairs = task["edges"].T
    if not np.array_equal(np.unique(pairs, axis=0), np.unique(pairs[:, ::-1], axis=0)):
        raise ValueError("the GCN batch needs undirected graphs (every edge in both directions)")
    graph_of_edge = np.repeat(np.arange(len(task["labels"])), np.diff(task["edge_offsets"]))
    edges = torch.as_tensor(task["edges"] + task["offsets"][:-1][graph_of_edge])  # local -> global positions
    n = len(x)
    with warnings.catch_warnings():  # torch: "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        adj_t = to_torch_csr_tensor(edges.flip(0), size=(n, n))  # GCNConv's sparse input: a sparse matmul
    return SimpleNamespace(x=torch.as_tensor(x), edge_index=adj_t, batch=torch.as_tensor(_node_graph(task)))


def _symmetric_gcn_conv():
    """torch-geometric's GCNConv whose sparse propagation knows that the normalised adjacency is
    symmetric. The graphs are undirected (graphs.edge_index lists both directions) and GCN's
    normalisation D^-1/2 (A + I) D^-1/2 keeps A_hat = A_hat^T entry for entry, so the backward's
    A_hat^T @ G is A_hat @ G with A_hat's own CSR: the same numbers as torch's backward, which builds
    the transpose's CSR by sorting on every call (about a sixth of the GCN jobs' CPU time at tiny scale)."""
    import torch
    from torch_geometric.nn import GCNConv

    class SymmetricSpmm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, adj, x):
            ctx.adj = adj
            return torch.sparse.mm(adj, x)

        @staticmethod
        def backward(ctx, grad):
            return None, torch.sparse.mm(ctx.adj, grad)

    class SymmetricGCNConv(GCNConv):
        def message_and_aggregate(self, adj_t, x):
            if adj_t.layout != torch.sparse_csr:  # only the batch built by _batch is known symmetric
                return super().message_and_aggregate(adj_t, x)
            return SymmetricSpmm.apply(adj_t, x)

    return SymmetricGCNConv


def gcn(task: dict, x: np.ndarray, parts, cfg: dict, seed: int) -> dict:
    import torch
    from torch import nn
    from torch_geometric.nn import global_add_pool, global_mean_pool

    GCNConv = _symmetric_gcn_conv()

    torch.manual_seed(seed)
    train, val, test = parts
    # cached=True: the normalised adjacency of the one fixed batch is computed once
    in_train = np.isin(_node_graph(task), train)
    mu, sd = x[in_train].mean(0), x[in_train].std(0) + 1e-6
    x = ((x - mu) / sd).astype(np.float32)  # standardised on the training graphs' nodes
    hidden = cfg["hidden"]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GCNConv(x.shape[1], hidden, cached=True), GCNConv(hidden, hidden, cached=True)
            self.head = nn.Linear(2 * hidden, 2)
            self.drop = nn.Dropout(cfg["dropout"])

        def forward(self, b):
            h = self.drop(torch.relu(self.c1(b.x, b.edge_index)))
            h = torch.relu(self.c2(h, b.edge_index))
            return self.head(torch.cat([global_mean_pool(h, b.batch), global_add_pool(h, b.batch)], 1))

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    batch = _batch(task, x)
    y = torch.as_tensor(task["labels"])
    tr, va, te = (torch.as_tensor(i) for i in (train, val, test))
    best, best_val = None, -1.0
    for _ in range(cfg["epochs"]):
        net.train()
        loss = nn.functional.cross_entropy(net(batch)[tr], y[tr])
        opt.zero_grad()
        loss.backward()
        opt.step()
        net.eval()
        with torch.no_grad():
            pred = net(batch).argmax(1)
        val_acc = float((pred[va] == y[va]).float().mean())
        if val_acc > best_val:
            best_val, best = val_acc, pred[te].numpy()
    return {**accuracy_f1(task["labels"][test], best), "val_accuracy": best_val}


def _node_graph(task: dict) -> np.ndarray:
    """The graph index of every node."""
    return np.repeat(np.arange(len(task["labels"])), np.diff(task["offsets"]))
