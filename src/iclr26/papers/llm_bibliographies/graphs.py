"""Local citation graphs and their features (card 2.1 step 5, 2.2).

A graph per focal paper per source (ground truth, LLM, random): nodes = the focal paper and its
listed references; edges = focal -- each listed reference (the list itself; `star`, our reading,
the paper's construction was not seen) and every citation link among the listed papers in
SciSciNet's PaperReferences, undirected and simple (networkx). Without the star (`star=False`) the
focal node stays, isolated, and only the citation links among the references remain: graphs can
then be disconnected, as the companion's stored graphs can (its notebook branches on
`nx.is_connected`).
Two graphs compared in a task are size-matched by node removal (the larger loses random reference
nodes until both have the same number of nodes), before either classifier sees them: sum pooling
and edge counts would otherwise read the list length.

Structure-only node features (card 2.2): degree centrality, closeness centrality, eigenvector
centrality, clustering coefficient, and the graph's edge count on every node. The random forest
reads their graph-level aggregates (mean, std, max, median of each, plus node and edge counts);
with embeddings it reads the sum of the node embeddings.
"""
from __future__ import annotations

import networkx as nx
import numpy as np

N_STRUCT = 5


def build(focal: int, refs: np.ndarray, adjacency: dict[int, set[int]], star: bool = True) -> nx.Graph:
    """The local citation graph of one reference list (ids), focal node first."""
    g = nx.Graph()
    g.add_node(int(focal))
    nodes = [int(r) for r in dict.fromkeys(int(r) for r in refs) if int(r) != int(focal)]
    g.add_nodes_from(nodes)
    if star:
        g.add_edges_from((int(focal), r) for r in nodes)
    members = set(nodes)
    for r in nodes:
        g.add_edges_from((r, c) for c in adjacency.get(r, ()) if c in members and c != r)
    return g


def size_match(a: nx.Graph, b: nx.Graph, focal: int, rng: np.random.Generator) -> tuple[nx.Graph, nx.Graph]:
    """Remove random non-focal nodes from the larger graph until both have as many nodes."""
    def trim(g, n):
        others = [v for v in g.nodes if v != focal]
        drop = rng.choice(len(others), size=g.number_of_nodes() - n, replace=False)
        h = g.copy()
        h.remove_nodes_from(others[i] for i in drop)
        return h

    n = min(a.number_of_nodes(), b.number_of_nodes())
    return (trim(a, n) if a.number_of_nodes() > n else a), (trim(b, n) if b.number_of_nodes() > n else b)


def node_features(g: nx.Graph) -> np.ndarray:
    """(n_nodes, 5) structure-only features, in g's node order."""
    nodes = list(g.nodes)
    deg = nx.degree_centrality(g) if len(nodes) > 1 else {nodes[0]: 0.0}
    clo = nx.closeness_centrality(g)
    eig = _eigenvector(g)
    clu = nx.clustering(g)
    m = g.number_of_edges()
    return np.array([[deg[v], clo[v], abs(eig[v]), clu[v], m] for v in nodes], dtype=np.float32)


def cached_features(g: nx.Graph, cache: dict) -> np.ndarray:
    """node_features(g), computed once per distinct graph: a list that is not trimmed by size
    matching gives the same graph in several tasks (e.g. the LLM list in GT vs LLM and LLM vs
    random). The key is the node order and the edge order, so a hit returns exactly what the
    computation would."""
    key = (tuple(g.nodes), tuple(g.edges))
    if key not in cache:
        cache[key] = node_features(g)
    return cache[key]


def _eigenvector(g: nx.Graph) -> dict:
    """Eigenvector centrality, as networkx's eigenvector_centrality_numpy where it applies (connected
    graphs), else its power iteration (disconnected graphs, which the numpy version refuses)."""
    nodes = list(g.nodes)
    if len(nodes) <= 2:
        return {v: 1 / np.sqrt(len(nodes)) for v in nodes}
    if g.number_of_edges() == 0:  # no links at all (possible without the star)
        return {v: 0.0 for v in nodes}
    if nx.is_connected(g):
        return _perron_vector(g, nodes)
    try:  # disconnected pieces: power iteration
        return nx.eigenvector_centrality(g, max_iter=1000, tol=1e-6)
    except nx.NetworkXException:
        return {v: 0.0 for v in nodes}


def _perron_vector(g: nx.Graph, nodes: list) -> dict:
    """What nx.eigenvector_centrality_numpy returns on a connected graph (the eigenvector of the
    largest adjacency eigenvalue, unit norm, positive sum), from a dense symmetric eigensolver
    (numpy's eigh) instead of ARPACK: the same vector to ~1e-15 (the top eigenvalue of a connected
    graph is simple), ~50x faster on graphs of tens of nodes. Hand-written because networkx has no
    dense variant; the test compares it with networkx's."""
    _, vectors = np.linalg.eigh(nx.to_numpy_array(g, nodelist=nodes, dtype=float))
    largest = vectors[:, -1]
    largest = largest / (np.sign(largest.sum()) * np.linalg.norm(largest))
    return dict(zip(nodes, largest.tolist()))


def without_star(g: nx.Graph, focal: int) -> nx.Graph:
    """The same node set without the focal -- reference edges (the focal node isolated)."""
    h = g.copy()
    h.remove_edges_from(list(h.edges(int(focal))))
    return h


def aggregate(feats: np.ndarray, n_edges: int) -> np.ndarray:
    """Graph-level structural vector for the random forest."""
    parts = [feats.mean(0), feats.std(0), feats.max(0), np.median(feats, 0)]
    return np.concatenate([*parts, [len(feats), n_edges]]).astype(np.float32)


def edge_index(g: nx.Graph) -> np.ndarray:
    """(2, 2E) directed edge list over g's node positions (both directions), for torch-geometric."""
    pos = {v: i for i, v in enumerate(g.nodes)}
    e = np.array([(pos[u], pos[v]) for u, v in g.edges], dtype=np.int64).reshape(-1, 2)
    return np.concatenate([e, e[:, ::-1]]).T.copy()
