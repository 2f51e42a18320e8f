"""Card 17, LDAR: the action space and band rule, the selectors, the LaRA-schema generator, the
frozen reader's distraction, the REINFORCE update, and the full-scale path offline (LaRA files
from a loopback server, a save_pretrained encoder as bge, the hub-layout LM as reader and judge).
(The smoke pipeline, determinism and resume are tests/test_contract.py's.)"""
import json

import numpy as np
import pytest
import torch

from iclr26.papers.ldar import data, methods, policy, tiny_env

SPEC = {"types": ["book", "financial", "paper"], "levels": list(data.LEVELS), "docs_per_type": 4,
        "lengths": ["l"], "length_spec": {"l": {"n_entities": 8, "n_passages": 64}},
        "document": {"n_attrs": 3, "look_alikes": 1, "n_values": 6, "filler_words": [3, 8]}}


# ----------------------------------------------------------------------------- action space
def test_band_is_the_official_quantile_index_rule():
    # lo = round((N-1) q_low), hi = round((N-1) min(q_low + q_delta, 1)), inclusive
    assert list(policy.band_positions(10, 0.25, 0.3)) == [2, 3, 4, 5]
    assert list(policy.band_positions(10, 0.9, 0.9)) == [8, 9]          # q_high clipped at 1
    assert list(policy.band_positions(10, 0.0, 0.0)) == [0]             # never empty
    sims = np.array([0.1, 0.9, 0.5, 0.7, 0.3])
    # ascending order 0, 4, 2, 3, 1: the top two quantiles are passages 3 and 1, read best first
    assert list(methods.ldar_band(sims, 0.75, 0.25)) == [1, 3]
    assert list(methods.ldar_band(sims, 0.0, 1.0)) == [1, 3, 2, 4, 0]


def test_selectors():
    sims = np.array([0.1, 0.9, 0.5, 0.7, 0.3, 0.2, 0.25, 0.15, 0.05, 0.0])
    assert methods.ratio_of("ratio_005") == 0.05 and methods.ratio_of("ratio_08") == 0.8
    assert methods.ratio_of("lc") is None
    assert list(methods.fixed_ratio(sims, 0.2)) == [1, 3]
    assert list(methods.fixed_ratio(sims, 0.01)) == [1]                 # at least one passage
    assert list(methods.long_context(sims)) == list(range(10))          # document order
    assert list(methods.adaptive_k(sims)) == [1]                        # the largest gap is after 0.9
    assert list(methods.top_k(sims, 3)) == [1, 3, 2]


# ----------------------------------------------------------------------------- data and reader
@pytest.fixture(scope="module")
def lara(tmp_path_factory):
    root = tmp_path_factory.mktemp("lara")
    data.write_synthetic(root, SPEC, seed=7)
    return root


def test_generator_writes_the_lara_schema(lara):
    rows = data.load_queries(lara, "l", SPEC["types"], data.LEVELS)
    assert {r["level"] for r in rows} == set(data.LEVELS)
    for row in rows:
        assert set(row) == {"type", "level", "length", "file", "context_order", "question", "answer"}
        text = data.load_document(lara, row)
        assert len(tiny_env.split_passages(text)) == 64
        m = data.QUESTIONS[row["level"]].match(row["question"])
        assert m, row["question"]
        if row["level"] == "hallu":                                     # the asked entity is not in the text
            assert row["answer"] == data.NOT_MENTIONED and f" of {m['e']} is" not in text
        elif row["level"] == "location":
            assert f"The {m['attr']} of {m['e']} is {row['answer']}." in text
    train, test = data.split_queries(rows, seed=0, train_fraction=0.8)
    assert not set(train) & set(test) and len(train) + len(test) == len(rows)
    for ctype in SPEC["types"]:                                         # 80/20 per (context type, task type)
        for level in data.LEVELS:
            stratum = [i for i, r in enumerate(rows) if r["type"] == ctype and r["level"] == level]
            assert len(set(stratum) & set(train)) == int(0.8 * len(stratum))
    assert data.split_queries(rows, seed=1, train_fraction=0.8)[0] != train


def test_reader_is_right_on_gold_and_distracted_by_the_whole_document(lara):
    reader = tiny_env.Reader(dim=16, sharpness=4.0, null_score=0.9, seed=0)
    rows = data.load_queries(lara, "l", SPEC["types"], data.LEVELS)
    vocab, gold_acc, all_acc = {}, [], []
    for row in rows:
        passages = tiny_env.split_passages(data.load_document(lara, row))
        ep = tiny_env.Episode.build(reader, row, passages, vocab)
        ids = [None] * len(vocab)
        for k, v in vocab.items():
            ids[v] = k
        masks = np.stack([ep["gold"], np.ones(len(passages), bool)])
        gold_acc.append(tiny_env.correct(reader, ep, masks, ids)[0])
        all_acc.append(tiny_env.correct(reader, ep, masks, ids)[1])
    assert np.mean(gold_acc) == 1.0
    assert np.mean(all_acc) < 0.85                                      # distraction: the premise of the paper


# ----------------------------------------------------------------------------- policy
def test_policy_shapes_padding_and_means():
    cfg = {"policy": {"d": 8, "heads": 2, "layers": 1, "n_frequencies": 4, "sigma": 1.0}}
    torch.manual_seed(0)
    net, base = policy.build(cfg)
    net.eval()                                                          # dropout off (the code's 0.1)
    x, pad = policy.pad_states([np.random.rand(5), np.random.rand(9)])
    assert x.shape == (2, 9, 1) and pad[0, 5:].all() and not pad[1].any()
    assert torch.all(x[0, :5, 0][1:] >= x[0, :5, 0][:-1])              # the state is sorted ascending
    params = net(x, pad)
    assert params.shape == (2, 4) and (params > 0).all()
    assert base(x, pad).shape == (2,)
    # padding does not change a query's output
    alone = net(*policy.pad_states([x[0, :5, 0].numpy()]))
    assert torch.allclose(alone, params[:1], atol=1e-5)
    acts = policy.mean_actions(net, [np.random.rand(5)])
    assert acts.shape == (1, 2) and ((acts > 0) & (acts < 1)).all()


def test_reinforce_moves_the_band_towards_the_rewarded_quantiles():
    """Reward 1 when the band starts in the top 30%: the trained policy's mean q_low goes up."""
    cfg = {"policy": {"d": 8, "heads": 2, "layers": 1, "n_frequencies": 4, "sigma": 1.0},
           "train": {"epochs": 8, "lr": 1e-2, "batch_size": 32, "warmup_fraction": 0.1, "replay_fraction": 0.2,
                     "entropy_start": 0.05, "entropy_end": 1e-4, "value_coef": 0.5, "collect": 16, "updates": 2}}
    rng = np.random.default_rng(0)
    sims = [rng.random(12) for _ in range(40)]
    out = policy.train(cfg, sims, lambda q, a: (a[:, 0] > 0.7).astype(float), seed=0)
    q_low = policy.mean_actions(out["policy"], sims)[:, 0]
    assert q_low.mean() > 0.6 and out["reward_curve"][-1] > out["reward_curve"][len(out["reward_curve"]) // 10]
    assert out["max_importance_weight"] > 0


def test_best_ratio_is_chosen_on_training_queries_of_the_trained_types():
    """best_ratio: the fixed ratio with the best accuracy on the training queries (hallu ignored)."""
    from iclr26.papers.ldar import stages

    class Env:  # reward 1 when exactly 6 of 60 passages are read (ratio 0.1), else 0; hallu the opposite
        rows = [{"level": lv} for lv in ("location", "comp", "hallu", "hallu", "hallu")]
        sims = [np.linspace(0, 1, 60)] * 5

        def rewards(self, queries, sels):
            return np.array([float((len(s) == 6) != (self.rows[q]["level"] == "hallu")) for q, s in zip(queries, sels)])

    cfg = {"train": {"groups": [{"name": "mixed", "levels": ["location", "reasoning", "comp"]}]}}
    assert stages.best_ratio(cfg, Env(), [0, 1, 2, 3, 4]) == 0.1


def test_openai_judge_over_a_loopback_server(monkeypatch):
    """The paper's GPT-4o judge path (judge.kind openai): the request carries the key, the model and
    the code's system and user prompts; the reply's True/False is read."""
    import http.server
    import threading

    from iclr26.papers.ldar import full_env

    seen = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen["auth"] = self.headers["Authorization"]
            seen["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reply = json.dumps({"choices": [{"message": {"content": "True"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("LDAR_TEST_KEY", "sk-test")
        spec = {"api_model": "gpt-4o", "api_url": f"http://127.0.0.1:{server.server_port}/v1/chat/completions",
                "api_key_env": "LDAR_TEST_KEY"}
        msgs = [{"role": "system", "content": full_env.JUDGE_SYSTEM},
                {"role": "user", "content": full_env.JUDGE.format(question="q?", answer="a", prediction="a")}]
        assert full_env.openai_chat(spec, msgs) == "True"
    finally:
        server.shutdown()
    assert seen["auth"] == "Bearer sk-test" and seen["body"]["model"] == "gpt-4o"
    assert seen["body"]["messages"][1]["content"].startswith("I will provide you with a question")
    monkeypatch.delenv("LDAR_TEST_KEY")
    with pytest.raises(RuntimeError):
        full_env.openai_chat(spec, msgs)


# ----------------------------------------------------------------------------- full scale, offline
def test_full_scale_path_offline(workdir, hub_model_dir, static_server):
    """scale=full with the LaRA files on a loopback server (sha256 checked), a save_pretrained BERT
    as the embedder and the hub-layout LM as reader and local judge: every row runs, one policy
    per task type trains on the official split, records carry the metrics."""
    import pandas as pd
    from transformers import AutoTokenizer, BertConfig, BertModel

    from iclr26.core.io import sha256_file
    from iclr26.core.job import load_records, run_paper

    root, base = static_server
    rng = np.random.default_rng(0)
    files = []
    for ctype, typ in (("book", "novelette_fake"), ("financial", "financial")):
        doc = root / "datasets" / "32k" / ctype / f"{ctype} doc.txt"
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(" ".join(rng.choice(["alpha", "beta", "gamma", "delta", "the", "of", "is"], 300)))
        files.append(doc)
        for level in data.LEVELS:
            for part in ("train", "test"):
                path = root / "datasets" / "traintest" / f"32k_{level}_{part}.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                old = json.loads(path.read_text()) if path.exists() else []
                old += [{"type": typ, "level": level, "length": "32k", "file": doc.name, "context_order": i,
                         "question": f"What is {w}?", "answer": w} for i, w in enumerate(["alpha", "beta"])]
                path.write_text(json.dumps(old))
    files += sorted((root / "datasets" / "traintest").glob("*.jsonl"))
    def entry(f):
        url = f"{base}/{f.relative_to(root).as_posix().replace(' ', '%20')}"
        return f'{{path: "{f.relative_to(root / "datasets").as_posix()}", url: "{url}", sha256: {sha256_file(f)}}}'

    entries = ",".join(entry(f) for f in files)
    embedder = workdir / "bge"
    tok = AutoTokenizer.from_pretrained(hub_model_dir)
    tok.save_pretrained(embedder)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=64)).save_pretrained(embedder)
    overrides = ["device=cpu", "threads=1", "seed_batch=3", f"data.lara.files=[{entries}]",
                 f"embedder.source={embedder}", "embedder.revision=null", "embedder.chunk_tokens=40",
                 "embedder.chunk_overlap=10", "embedder.max_length=64", "embedder.batch_size=8",
                 f"model.source={hub_model_dir}", "model.revision=null", "model.dtype=float32",
                 "judge.max_new_tokens=2", "eval.max_new_tokens=4", "eval.batch_size=8",
                 "eval.max_context_tokens=200", "eval.oracle_ratios=[0.5]",
                 "policy.d=8", "policy.heads=2", "policy.layers=1", "policy.n_frequencies=4",
                 "train.epochs=1", "train.batch_size=2", "train.collect=2", "train.updates=1"]
    records = pd.DataFrame(load_records(run_paper("ldar", "full", overrides, seeds=[0, 1, 2],  # 3: claim tests
                                                  methods=["lc", "best_ratio", "ldar", "oracle"])))
    assert set(records["method"]) == {"lc", "best_ratio", "ldar", "oracle"}
    assert set(records["level"]) == {"all", "trained", *data.LEVELS}
    assert records["accuracy"].between(0, 1).all() and records["usage_ratio"].between(0, 1).all()
    usage = records[records["level"] == "all"].groupby("method")["usage_ratio"].mean()
    assert usage["lc"] == 1.0 and 0 < usage["ldar"] <= 1.0
    hallu = records[(records["level"] == "hallu") & (records["method"] == "lc")]
    assert (hallu["n_queries"] == 8).all()                              # every hallu query is a test query
    policies = {p.name for p in (workdir / "runs/full/ldar/ldar").rglob("policy_*.pt")}
    assert policies == {f"policy_s{s}_32k_{g}.pt" for s in range(3) for g in ("location", "reasoning", "comp")}
