"""Card 04 (ICL vs SFT): the task geometry and prior, the serialisation, the measurements, the two
learners, the stacked pretraining, and the full-scale path offline (a save_pretrained hub-layout LM,
full fine-tuning as full.yaml runs it)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from iclr26.core.job import load_records, run_paper
from iclr26.papers.icl_vs_sft import analysis, data

SLUG = "icl_vs_sft"
FMT = {"template": "{x1} {x2}{label}", "sep": "\n", "labels": [" A", " B"]}
SPEC = {"grid": 12, "centre": [0.3, 0.7], "n_tasks_per_side": 3, "shot_pool": 8, "n_queries": 20, "data_seed": 1}


def test_the_prior_puts_a_on_the_side_of_larger_sums_and_anti_tasks_reverse_it():
    w, c = np.array([[0.0, 1.0]]), np.array([[5.5, 5.5]])   # boundary x2 = 5.5
    x = np.array([[[0, 9], [9, 0]]], dtype=float)
    assert labels_list(x, w, c, True) == [0, 1]             # pro: x2 > 5.5 (larger sum) -> A
    assert labels_list(x, w, c, False) == [1, 0]
    assert labels_list(x, -w, c, True) == [0, 1]            # the normal's sign does not matter
    rng = np.random.default_rng(0)
    xs, ys = data.pretraining_batch(rng, 4000, {**SPEC, "examples_per_sequence": 12, "prior_p": 0.8})
    big = xs.sum(-1) > 11
    share = (ys[big] == 0).mean()                           # A on large sums ~ 0.8 of tasks (diluted by geometry)
    assert 0.6 < share < 0.8 and abs((ys[~big & (xs.sum(-1) < 11)] == 1).mean() - share) < 0.05


def labels_list(x, w, c, pro):
    return data.labels_of(x, w, c, np.array([pro]))[0].tolist()


def test_tasks_are_seeded_balanced_per_side_with_disjoint_shots_and_queries():
    rows = data.generate_tasks(SPEC, [0, 1])
    assert rows == data.generate_tasks(SPEC, [0, 1]) and len(rows) == 12
    assert rows[:6] == data.generate_tasks(SPEC, [0])             # a seed's tasks do not depend on the others
    assert [r["side"] for r in rows[:6]] == ["pro"] * 3 + ["anti"] * 3
    for r in rows:
        shots, queries = {tuple(s[:2]) for s in r["shots"]}, {tuple(q[:2]) for q in r["queries"]}
        assert len(shots) == 8 and len(queries) == 20 and not shots & queries
        rel, _, y = data.coordinates(r)
        pro = r["side"] == "pro"
        side_a = np.sign(rel - np.dot(r["w"], r["c"]))[y == 0]      # every A on one side of the line
        assert abs(side_a.sum()) == len(side_a)
        assert (side_a[0] == np.sign(sum(r["w"]))) == pro            # ...the larger-sum side iff pro
    for pro, anti in zip(rows[:3], rows[3:6]):                      # anti task i mirrors pro task i
        assert (pro["w"], pro["c"]) == (anti["w"], anti["c"])
        for a, b in ((pro["shots"], anti["shots"]), (pro["queries"], anti["queries"])):
            assert [p[:2] for p in a] == [q[:2] for q in b] and all(p[2] == 1 - q[2] for p, q in zip(a, b))


def test_serialisation_and_the_tiny_tokenizer_agree(tmp_path):
    from iclr26.papers.icl_vs_sft.model import (
        build_tokenizer,
        check_tiny_serialisation,
        encode,
        label_token_ids,
        load_tokenizer,
    )

    assert data.prompt_text(FMT, [[1, 2, 0], [3, 4, 1]], [5, 6, 0]) == "1 2 A\n3 4 B\n5 6"
    assert data.prompt_text(FMT, [], [5, 6, 1]) == "5 6"
    tok = build_tokenizer(FMT, 12)
    check_tiny_serialisation(tok, FMT, 12)
    a, b = label_token_ids(tok, FMT)
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=len(tok)).save_pretrained(tmp_path)      # prepare's directory: a qwen2 model type
    tok.save_pretrained(tmp_path)
    check_tiny_serialisation(load_tokenizer(tmp_path, None), FMT, 12)   # read back as train() reads it
    assert encode(tok, ["11 0 B"])[0] == [tok.convert_tokens_to_ids("11"), tok.convert_tokens_to_ids("0"), b] and a != b


def test_label_variance_fraction_and_probes():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 40)
    collapsed = np.where(y[:, None] == 0, 1.0, -1.0) * np.ones((80, 5))
    assert analysis.label_var_fraction(collapsed, y) == pytest.approx(1.0)
    noise = rng.normal(size=(80, 5))
    assert analysis.label_var_fraction(noise, y) < 0.15
    assert analysis.label_var_fraction(collapsed + 0.5 * noise, y) > 0.6
    target = rng.normal(size=80)
    h = np.c_[target, rng.normal(size=(80, 7))]
    alphas = [1e-3, 1e-1, 10.0]
    decodable, noise_r2 = analysis.probe_r2(h, np.c_[target, rng.normal(size=80)], alphas)
    assert decodable > 0.95 and noise_r2 < 0.2
    assert analysis.probe_r2(rng.normal(size=(80, 8)), target[:, None], alphas)[0] < 0.2
    u = np.eye(5)[0]                                                # collapse only along the readout
    along_readout = np.c_[np.where(y == 0, 3.0, -3.0), noise[:, 1:]]
    assert analysis.label_var_fraction(along_readout, y) > 0.4
    assert analysis.label_var_fraction(analysis.without_direction(along_readout, u), y) < 0.15


def test_task_measures_over_confidence_and_selectivity():
    rng = np.random.default_rng(1)
    task = data.generate_tasks({**SPEC, "n_queries": 60}, [0])[0]
    rel, irr, y = data.coordinates(task)
    probs = np.where(rng.random(60)[:, None] < 0.5, [[0.99, 0.01]], [[0.01, 0.99]])   # sure, at chance
    hidden = np.stack([rng.normal(size=(60, 5)),                                        # embeddings
                       np.c_[rel, irr, rng.normal(size=(60, 3))],                       # middle: both
                       np.c_[rel, rng.normal(size=(60, 4))]])                          # last: irrelevant gone
    m = analysis.task_measures(task, probs, hidden, np.eye(5)[4], [1e-3, 1.0])
    assert m["overconfidence"] == pytest.approx(0.99 - m["acc"]) and 0.2 < m["acc"] < 0.8
    rec = analysis.record(0, 8, [m, {**m, "side": "anti"}])
    assert rec["r2_selectivity_last"] > 0.8 and abs(rec["r2_selectivity_mid"]) < 0.1
    assert rec["r2_selectivity_last"] == pytest.approx(rec["r2_relevant_last"] - rec["r2_irrelevant_last"])
    assert rec["prior_gap"] == 0 and len(rec["label_var_frac_layers"]) == 3


def test_stacked_pretraining_is_one_run_per_seed():
    import torch

    from iclr26.papers.icl_vs_sft import model

    spec = {"config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
                       "max_position_embeddings": 64}}
    pre = {"prior_p": 0.8, "examples_per_sequence": 4, "centre": [0.3, 0.7], "steps": 6, "batch_size": 4,
           "lr": 1e-2, "pct_start": 0.3, "weight_decay": 0.01}
    (a0, a1), _, losses = model.pretrain(spec, pre, FMT, 12, [0, 1])
    (b1,), _, alone = model.pretrain(spec, pre, FMT, 12, [1])
    assert np.allclose(losses[1], alone[0], atol=1e-5) and not np.allclose(losses[0], losses[1])
    for (n, p), (_, q) in zip(a1.named_parameters(), b1.named_parameters()):
        assert torch.allclose(p, q, atol=1e-5), n
    assert not torch.allclose(a0.model.embed_tokens.weight, a1.model.embed_tokens.weight)


def test_sft_restarts_from_the_pretrained_weights_and_k0_is_the_same_model_for_both():
    import torch

    from iclr26.core.lm.model import build_model
    from iclr26.papers.icl_vs_sft.learners import Learners
    from iclr26.papers.icl_vs_sft.model import build_tokenizer

    tok = build_tokenizer(FMT, 12)
    net = build_model({"config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                                  "intermediate_size": 32, "max_position_embeddings": 64}}, tok, seed=0).eval()
    train = {"precision": "fp32", "sharding": "none", "micro_batch_size": 7, "max_length": 64,
             "sft_steps": 5, "sft_lr": 1e-2}
    learners = Learners(net, tok, FMT, train, "cpu")
    task = data.generate_tasks(SPEC, [0])[0]
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    p0, h0, u0 = learners.icl(task, 0)
    s0, g0, v0 = learners.sft(task, 0)
    assert np.array_equal(p0, s0) and np.array_equal(h0, g0) and h0.shape == (2, 20, 16)
    assert np.array_equal(u0, v0) and np.linalg.norm(u0) == pytest.approx(1.0)
    s4, _, _ = learners.sft(task, 4)
    assert not np.allclose(s4, s0)                                  # fine-tuning changed the answers
    assert all(torch.equal(p, before[n]) for n, p in net.named_parameters())   # and was undone
    assert np.allclose(learners.sft(task, 4)[0], s4, atol=1e-6)     # each task starts afresh
    p4, _, _ = learners.icl(task, 4)                                   # ICL: shots in the prompt, weights untouched
    assert all(torch.equal(p, before[n]) for n, p in net.named_parameters()) and not np.allclose(p4, p0)
    tasks = data.generate_tasks(SPEC, [0])[:3]
    one_by_one = learners.sft_tasks(tasks, 4)                       # sft_parallel_tasks unset: one at a time
    learners.train = {**train, "sft_parallel_tasks": 2}             # vectorised Adam over stacked weights
    together = learners.sft_tasks(tasks, 4)
    for (a, ha, ua), (b, hb, ub) in zip(one_by_one, together):
        assert np.allclose(a, b, atol=1e-5) and np.allclose(ha, hb, atol=1e-4) and np.allclose(ua, ub, atol=1e-5)
    assert not np.allclose(one_by_one[0][2], u0)                     # the readout is the fine-tuned one
    assert all(torch.equal(p, before[n]) for n, p in net.named_parameters())


def test_full_scale_path_on_a_hub_layout_model_offline(workdir, hub_model_dir):
    """scale=full with the hub id replaced by a save_pretrained directory (byte-level BPE, Qwen2),
    full fine-tuning one task at a time as full.yaml runs it (fp32 here: CPU): the path a real run
    takes, on CPU."""
    overrides = ["device=cpu", "threads=1", f"model.source={hub_model_dir}", "train.precision=fp32",
                 # this BPE writes ' A' as two tokens (Qwen2.5's is one): the label follows a space here
                 "format.template='{x1} {x2} {label}'", "format.labels=[A,B]",
                 "train.sft_steps=3",
                 "data.tasks.n_tasks_per_side=1", "data.tasks.n_queries=12", "eval.ks=[0,2]"]
    records = pd.DataFrame(load_records(run_paper(SLUG, "full", overrides, seeds=[0, 1, 2])))  # 3: claim tests
    assert set(records["method"]) == {"icl", "sft"} and set(records["k"]) == {0, 2}
    assert records[["acc", "confidence"]].stack().between(0, 1).all()
    k0 = {m: rows.sort_values("seed")["confidence"].to_numpy()
          for m, rows in records[records["k"] == 0].groupby("method")}
    assert np.array_equal(k0["icl"], k0["sft"])                      # no shot: the base model
    k2 = records[records["k"] == 2].groupby("method")["confidence"].mean()
    assert k2["sft"] != k2["icl"]                                    # the weights trained
    assert len(records["r2_irrelevant_layers"].iloc[0]) == 3           # embeddings + 2 layers
    assert not (workdir / "data/full/icl_vs_sft/prepared/tasks/model").exists()   # nothing pretrained
