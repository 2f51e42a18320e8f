"""Card 10 (LLM bibliographies): the method's unit tests and the offline full-scale path."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from iclr26.papers.llm_bibliographies import build, classify, corpus, graphs

SPEC = dict(n_papers=300, topic_dim=8, n_fields=2, n_subfields=2, field_scale=1.0, subfield_scale=0.6,
            paper_scale=0.5, n_years=10, vocab=200, n_generic=20, generic_fraction=0.3, word_sharpness=3.0,
            title_words=6, abstract_words=[8, 12], id_offset=5000, year_offset=2000,
            citations=dict(mean_refs=8, dispersion=5, min_refs=3, max_refs=20, beta=5.0, alpha=1.0,
                           recency_tau=5.0, triadic=0.3),
            focal=dict(n=30, years=[2007, 2010], min_refs=3, max_refs=54))


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    out = tmp_path_factory.mktemp("raw")
    corpus.write_synthetic(out, SPEC, 0)
    return out


def test_corpus_release_format_and_citation_process(raw):
    papers = corpus.stream_rows(raw / corpus.PAPERS, corpus.PAPER_COLUMNS)
    assert list(papers.columns) == corpus.PAPER_COLUMNS and len(papers) == SPEC["n_papers"]
    refs = corpus.stream_rows(raw / corpus.REFERENCES, ["Citing_PaperID", "Cited_PaperID"], chunksize=97)
    year = dict(zip(papers.PaperID, papers.Year))
    assert all(year[c] < year[d] for c, d in zip(refs.Cited_PaperID, refs.Citing_PaperID))  # cites the past
    counts = refs.groupby("Citing_PaperID").size()
    assert (papers.set_index("PaperID").Reference_Count[counts.index] == counts).all()
    # the chunked, filtered read keeps exactly the rows asked for, across chunk boundaries
    some = papers.PaperID.to_numpy()[::7]
    kept = corpus.stream_rows(raw / corpus.REFERENCES, ["Citing_PaperID", "Cited_PaperID"], corpus.ids_in(some),
                              chunksize=50)
    assert len(kept) == refs.Citing_PaperID.isin(some).sum()


def test_triadic_closure_makes_lists_linked():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(400, 4))
    year = rng.integers(1, 11, size=400)
    spec = {"citations": dict(SPEC["citations"])}

    def density(triadic):
        spec["citations"]["triadic"] = triadic
        refs = corpus.human_citations(np.random.default_rng(1), year, z, spec)
        adj = {i: set(r) for i, r in enumerate(refs)}
        for i, r in enumerate(refs):
            for j in r:
                adj.setdefault(j, set()).add(i)
        d = [sum(len(adj[a] & set(r)) for a in r) / max(1, len(r) * (len(r) - 1)) for r in refs if len(r) > 2]
        return np.mean(d)

    assert density(0.6) > density(0.0)


def test_top_level_field_from_two_field_rows_per_paper(raw):
    """PaperFields holds a top-level and a subfield row per paper, in either order; the loader keeps
    the top-level one (SciSciNet_Fields' Field_Type), which the generator derived from JournalID."""
    rows = corpus.stream_rows(raw / corpus.FIELDS, ["PaperID", "FieldID"])
    assert (rows.groupby("PaperID").size() == 2).all()
    first = rows.drop_duplicates("PaperID")
    assert (first.FieldID >= 1000).any() and (first.FieldID < 1000).any()  # a first-row pick would mix levels
    tables = build.read_tables(raw)
    journal = dict(zip(tables["papers"].PaperID, tables["papers"].JournalID))
    assert len(tables["field"]) == SPEC["n_papers"]
    assert all(f == 100 + (journal[p] - 1000) // 10 for p, f in tables["field"].items())


def test_zip_reader_skips_macos_resource_forks(tmp_path):
    import zipfile

    path = tmp_path / "x.tsv.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("__MACOSX/._x.tsv", "\x00\x05junk")
        archive.writestr("._x.tsv", "\x00\x05junk")
        archive.writestr("x.tsv", "PaperID\tPaperTitle\n1\ta\n2\tb\n")
    assert corpus.stream_rows(path, ["PaperID", "PaperTitle"]).PaperID.tolist() == [1, 2]


def test_graphs_without_the_star_and_node_controls():
    adj = {1: {2}, 2: {1}}
    g = graphs.build(0, np.array([1, 2, 3]), adj, star=False)
    assert g.number_of_nodes() == 4 and set(g.edges) == {(1, 2)}
    h = graphs.without_star(graphs.build(0, np.array([1, 2, 3]), adj), 0)
    assert set(h.nodes) == set(g.nodes) and set(h.edges) == set(g.edges)
    feats = graphs.node_features(h)  # disconnected, with an isolated focal node
    assert np.isfinite(feats).all() and feats[0, 0] == 0
    assert np.isfinite(graphs.node_features(graphs.build(0, np.array([1, 3, 4]), {}, star=False))).all()
    task = {"node_ids": np.array([7, 8, 7, 9]), "offsets": np.array([0, 2, 4])}
    v = classify.node_matrix(task, "random_vec", np.zeros((1, 5)), None, 0)
    assert v.shape == (4, 5) and np.allclose(v[0], v[2]) and not np.allclose(v[0], v[1])  # fixed per PaperID
    fresh = classify.node_matrix(task, "random_vec_fresh", np.zeros((1, 5)), None, 0)
    assert not np.allclose(fresh[0], fresh[2])
    meta = np.array([[1.0, 2000], [3.0, 2010], [5.0, 2020]], np.float32)
    x = classify.node_matrix(task, "meta", None, {7: 0, 8: 1, 9: 2}, 0, meta)
    assert np.allclose(classify.graph_vectors(task, "meta", x), [[2, 2005, 2, 2005], [3, 2010, 3, 2010]])


def test_graph_size_matching_and_features():
    adj = {1: {2}, 2: {1, 3}, 3: {2}}
    g = graphs.build(0, np.array([1, 2, 3, 4, 5]), adj)
    assert g.number_of_nodes() == 6 and g.number_of_edges() == 5 + 2  # star + links among the references
    h = graphs.build(0, np.array([1, 2]), adj)
    a, b = graphs.size_match(g, h, 0, np.random.default_rng(0))
    assert a.number_of_nodes() == b.number_of_nodes() == 3 and 0 in a and 0 in b
    feats = graphs.node_features(h)
    assert feats.shape == (3, graphs.N_STRUCT)
    assert np.allclose(feats[:, 0], 1.0) and np.allclose(feats[:, 3], 1.0)  # a triangle: full degree, clustering 1
    assert np.allclose(feats[:, 4], 3)
    e = graphs.edge_index(h)
    assert e.shape == (2, 6)


def test_dense_eigenvector_centrality_is_networkx_s_and_features_are_cached_per_graph():
    import networkx as nx

    rng = np.random.default_rng(0)
    for n in (3, 5, 12, 30):
        g = graphs.build(0, np.arange(1, n), {i: {int(j) for j in rng.choice(np.arange(1, n), 2)} - {i}
                                              for i in range(1, n)})
        ours, theirs = graphs._eigenvector(g), nx.eigenvector_centrality_numpy(g)
        assert np.allclose([ours[v] for v in g], [theirs[v] for v in g], atol=1e-12)
    star = nx.star_graph(4)  # bipartite: eigenvalues +-2, the centrality is the +2 eigenvector
    assert np.allclose(list(graphs._eigenvector(star).values()),
                       list(nx.eigenvector_centrality_numpy(star).values()), atol=1e-12)
    cache = {}
    a = graphs.cached_features(graphs.build(0, np.array([1, 2, 3]), {1: {2}, 2: {1}}), cache)
    b = graphs.cached_features(graphs.build(0, np.array([1, 2, 3]), {1: {2}, 2: {1}}), cache)
    plain = graphs.build(0, np.array([1, 2, 3]), {})
    c = graphs.cached_features(plain, cache)
    assert a is b and len(cache) == 2 and np.array_equal(c, graphs.node_features(plain))


def test_weighted_draw_is_numpy_s_choice():
    p = np.random.default_rng(1).random(50) ** 4
    p[[3, 7]] = 0.0
    p /= p.sum()
    ours, theirs = np.random.default_rng(5), np.random.default_rng(5)
    assert [corpus._weighted_draw(ours, p) for _ in range(200)] == [int(theirs.choice(50, p=p)) for _ in range(200)]


def test_split_keeps_pairs_together_and_random_baseline_is_field_matched():
    pair = np.repeat(np.arange(40), 2)
    train, val, test = classify.split(pair, 3)
    sides = [set(pair[i]) for i in (train, val, test)]
    assert not (sides[0] & sides[1] or sides[0] & sides[2] or sides[1] & sides[2])
    assert len(train) == 56 and len(val) == 12 and len(test) == 12
    focal = np.array([10, 11, 12, 13])
    gt = {10: np.array([1, 2]), 11: np.array([3, 4, 5]), 12: np.array([6, 7]), 13: np.array([8, 9])}
    field = {10: "a", 11: "a", 12: "b", 13: "b"}
    rnd = build.random_lists(focal, gt, field, 0)
    assert set(rnd[10]) <= {3, 4, 5} and len(rnd[10]) == 2 and set(rnd[12]) <= {8, 9}


def test_classifiers_separate_a_planted_signal_and_not_noise():
    rng = np.random.default_rng(0)
    task = {"labels": np.tile([0, 1], 60), "pair": np.repeat(np.arange(60), 2)}
    sizes = np.full(120, 4)
    task["offsets"] = np.concatenate([[0], np.cumsum(sizes)])
    star = np.array([[0, 0, 0], [1, 2, 3]])
    task["edges"] = np.concatenate([np.concatenate([star, star[::-1]], 1)] * 120, 1)
    task["edge_offsets"] = np.arange(121) * 6
    x = rng.normal(size=(480, 6)).astype(np.float32)
    x[np.repeat(task["labels"], 4) == 1, 0] += 3.0  # class 1 nodes carry a shifted feature
    parts = classify.split(task["pair"], 0)
    rf = classify.random_forest(classify.graph_vectors(task, "embed", x), task["labels"], parts, {"trees": 50}, 0)
    gcn = classify.gcn(task, x, parts, {"hidden": 8, "lr": 1e-2, "weight_decay": 0.0, "dropout": 0.0,
                                        "epochs": 60}, 0)
    assert rf["accuracy"] > 0.8 and gcn["accuracy"] > 0.8
    # the symmetric propagation's gradients are those of torch-geometric's own GCNConv
    import torch
    from torch_geometric.nn import GCNConv

    batch, grads = classify._batch(task, x), []
    for conv in (GCNConv(6, 4, cached=True), classify._symmetric_gcn_conv()(6, 4, cached=True)):
        torch.manual_seed(0)
        conv.reset_parameters()
        conv(batch.x, batch.edge_index).square().sum().backward()
        grads.append(conv.lin.weight.grad)
    assert torch.equal(*grads)
    with pytest.raises(ValueError, match="undirected"):
        classify._batch({**task, "edges": task["edges"][:, :3]}, x)
    noise = classify.node_matrix({"node_ids": np.arange(480)}, "random_vec", x, None, 0)
    rf0 = classify.random_forest(classify.graph_vectors(task, "embed", noise), task["labels"], parts, {"trees": 50}, 0)
    assert rf0["accuracy"] < 0.8


def test_recommender_never_sees_the_focal_lists(raw, monkeypatch):
    from iclr26.papers.llm_bibliographies import recommender

    tables = build.read_tables(raw)
    focal = corpus.choose_focal(tables["papers"], SPEC, 0)
    ids = tables["papers"].PaperID.to_numpy()
    seen = {}

    def spy(text, citing, cited, rank, cfg, seed):
        seen["citing"] = set(ids[citing].tolist())
        return real(text, citing, cited, rank, cfg, seed)

    real = recommender.train
    monkeypatch.setattr(recommender, "train", spy)
    refs = corpus.stream_rows(raw / corpus.REFERENCES, ["Citing_PaperID", "Cited_PaperID"], corpus.ids_in(focal))
    gt = {int(f): refs.Cited_PaperID[refs.Citing_PaperID == f].to_numpy() for f in focal}
    cfg = {"llm": dict(text_dim=16, text_seed=1, ranks=[2], hidden=8, lr=1e-2, weight_decay=0.0, epochs=1,
                       batch_size=256, temperature=0.7, existence_rate=1.0)}
    lists = build.llm_lists_tiny(raw, tables, focal, gt, cfg, 0, lambda *_: None)[2]
    assert seen["citing"] and not seen["citing"] & set(focal.tolist())
    assert all(len(lists[int(f)]) == len(gt[int(f)]) for f in focal)  # n = the true count, existence 1


def _tiny_bert(directory):
    """A small BERT with a word-level vocabulary, written with save_pretrained (SPECTER's layout)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    words = [f"w{i}" for i in range(SPEC["vocab"] + SPEC["n_generic"])]
    (directory / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizerFast(vocab_file=str(directory / "vocab.txt")).save_pretrained(directory)
    BertModel(BertConfig(vocab_size=len(words) + 5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=64)).save_pretrained(directory)
    return directory


def test_full_scale_path_offline(workdir, static_server, raw):
    """acquire from loopback figshare/zenodo URLs in the release's formats, the companion's list file,
    prepare with a save_pretrained encoder, and evaluate, through the same loaders as tiny."""
    import shutil

    from iclr26.core.job import load_records, run_paper

    root, base = static_server
    ids = {"SciSciNet_Papers.tsv": 36139287, "SciSciNet_PaperFields.tsv": 36139311, "SciSciNet_Fields.tsv": 36222114,
           "SciSciNet_PaperDetails.tsv.zip": 36139233, "SciSciNet_PaperReferences.tsv.zip": 36139221}
    for name, file_id in ids.items():
        shutil.copy(raw / name, root / str(file_id))
    papers = corpus.stream_rows(raw / corpus.PAPERS, corpus.PAPER_COLUMNS)
    focal = corpus.choose_focal(papers, SPEC, 0)
    rng = np.random.default_rng(0)
    rows = [{"id": int(f), "PaperID": int(p) if e else np.nan, "Exists": float(e), "Title": "t"}
            for f in focal for p, e in zip(rng.choice(papers.PaperID, 6, replace=False), rng.random(6) < 0.6)]
    pd.DataFrame(rows).to_csv(root / "generated_references.csv", index=False)
    model = _tiny_bert(workdir / "encoder")
    overrides = [f"data.scisci.figshare_url='{base}/{{id}}'", f"data.scisci.zenodo_url='{base}/{{name}}'",
                 f"embed.source={model}", "embed.revision=null", "device=cpu", "embed.batch_size=64",
                 "embed.max_length=32",
                 "rf.trees=20", "gcn.epochs=5", "gcn.hidden=8"]
    evals = run_paper("llm_bibliographies", "full", overrides, seeds=[0, 1, 2], methods=[
        "rf_struct", "rf_struct_nostar", "rf_meta", "gcn_embed", "rf_embed_low_rank"])
    records = pd.DataFrame(load_records(evals))
    scored = records[records.task.isin(["gt_llm", "gt_random", "llm_random"])]
    assert set(scored.method) == {"rf_struct", "rf_struct_nostar", "rf_meta", "gcn_embed"}
    assert scored.accuracy.between(0, 1).all()
    assert set(scored.task) == {"gt_llm", "gt_random", "llm_random"}
    described = records[records.task == "describe"]
    assert set(described.source) == {"gt", "random", "llm_headline"}
    assert (described[described.source == "gt"].gt_overlap == 1).all()
