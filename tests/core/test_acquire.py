"""The full-scale acquisition path, exercised offline against a loopback HTTP server."""
import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from iclr26.core.acquire import check_content, download, from_pretrained, git_blob_sha1, local_snapshot, snapshot_model
from iclr26.core.errors import DataError

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves PAYLOAD with Range support; can drop the first connection midway."""

    drop_first = False
    requests: list = []

    def do_GET(self):  # noqa: N802
        type(self).requests.append(self.headers.get("Range"))
        if self.path != "/data.bin":
            self.send_error(404)
            return
        start = 0
        if rng := self.headers.get("Range"):
            start = int(rng.split("=")[1].split("-")[0])
        body = PAYLOAD[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if type(self).drop_first and len(type(self).requests) == 1:
            self.wfile.write(body[: len(body) // 3])  # then close: a dropped connection
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    RangeHandler.requests = []
    RangeHandler.drop_first = False
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", RangeHandler
    httpd.shutdown()


SHA = hashlib.sha256(PAYLOAD).hexdigest()


def test_download_checks_sha256(server, tmp_path):
    url, _ = server
    path = download(f"{url}/data.bin", tmp_path / "data.bin", SHA, backoff=0)
    assert path.read_bytes() == PAYLOAD


def test_download_resumes_after_a_dropped_connection(server, tmp_path):
    url, handler = server
    handler.drop_first = True
    download(f"{url}/data.bin", tmp_path / "data.bin", SHA, backoff=0)
    assert handler.requests[0] is None and handler.requests[1].startswith("bytes=")  # resumed, not restarted
    assert (tmp_path / "data.bin").read_bytes() == PAYLOAD


def test_existing_verified_file_needs_no_network(tmp_path):
    (tmp_path / "data.bin").write_bytes(PAYLOAD)
    before = (tmp_path / "data.bin").stat().st_mtime_ns
    path = download("http://127.0.0.1:9/never", tmp_path / "data.bin", SHA)  # port 9: nothing listens
    assert path == tmp_path / "data.bin" and path.stat().st_mtime_ns == before and path.read_bytes() == PAYLOAD


def test_checksum_mismatch_is_one_clear_error(server, tmp_path):
    url, _ = server
    with pytest.raises(DataError, match="sha256 mismatch"):
        download(f"{url}/data.bin", tmp_path / "data.bin", "0" * 64, backoff=0)
    assert not (tmp_path / "data.bin").exists() and not (tmp_path / "data.bin.part").exists()


def test_missing_file_is_not_retried(server, tmp_path):
    url, handler = server
    with pytest.raises(DataError, match="HTTP 404"):
        download(f"{url}/nope.bin", tmp_path / "x", None, retries=3, backoff=0)
    assert len(handler.requests) == 1


def test_from_pretrained_loads_a_saved_directory(tmp_path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=32)).eval()
    model.save_pretrained(tmp_path / "tiny-gpt2")
    loaded = from_pretrained(GPT2LMHeadModel, str(tmp_path / "tiny-gpt2")).eval()
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(model(ids).logits, loaded(ids).logits)


def test_from_pretrained_names_a_bad_directory(tmp_path):
    from transformers import GPT2LMHeadModel

    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no config.json"):
        from_pretrained(GPT2LMHeadModel, str(tmp_path / "empty"))


# --------------------------------------------------------------------------- pinned hub models
class HubHandler(http.server.BaseHTTPRequestHandler):
    """The two hub endpoints snapshot_download uses, over a save_pretrained folder: the file tree of
    a commit (/api/models/<repo>/tree/<commit>) and each file (/<repo>/resolve/<commit>/<path>)."""

    root = None
    repo = "org/tiny-r1"
    commit = "0123456789abcdef0123456789abcdef01234567"
    requests: list = []

    def _file(self):
        prefix = f"/{self.repo}/resolve/{self.commit}/"
        if not self.path.startswith(prefix) or not (path := self.root / self.path[len(prefix):]).is_file():
            self.send_error(404)
            return None
        body = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Repo-Commit", self.commit)
        self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        self.end_headers()
        return body

    def do_HEAD(self):  # noqa: N802
        type(self).requests.append(self.path)
        self._file()

    def do_GET(self):  # noqa: N802
        type(self).requests.append(self.path)
        if self.path.split("?")[0] == f"/api/models/{self.repo}/tree/{self.commit}":
            files = [{"type": "file", "path": p.name, "size": p.stat().st_size, "oid": git_blob_sha1(p)}
                     for p in sorted(self.root.iterdir()) if p.is_file()]
            body = json.dumps(files).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif (body := self._file()) is not None:
            self.wfile.write(body)

    def log_message(self, *args):
        pass


ARCH = {"hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64, "num_attention_heads": 2,
        "num_key_value_heads": 2}


@pytest.fixture
def hub(hub_model_dir):
    HubHandler.root, HubHandler.requests = hub_model_dir, []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _spec(tmp_path, **extra):
    return {"source": HubHandler.repo, "revision": HubHandler.commit, "cache_dir": str(tmp_path / "hub"),
            "arch": ARCH, **extra}


def test_a_pinned_model_is_fetched_once_then_loaded_offline(hub, hub_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from iclr26.core.lm.model import build_model
    from iclr26.core.lm.tokenizer import load_tokenizer

    info = snapshot_model(_spec(tmp_path), endpoint=hub)
    assert info["revision"] == HubHandler.commit and info["files"] == len(list(hub_model_dir.iterdir()))
    assert f"/{HubHandler.repo}/resolve/{HubHandler.commit}/config.json" in HubHandler.requests
    path = local_snapshot(_spec(tmp_path))                   # no endpoint: the hub is not asked
    assert path == Path(info["path"]) and HubHandler.commit in str(path)
    model = build_model(_spec(tmp_path), load_tokenizer(path))
    reference = AutoModelForCausalLM.from_pretrained(hub_model_dir)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_a_missing_snapshot_is_one_line_naming_it(hub, tmp_path):
    spec = _spec(tmp_path, revision="f" * 40)
    with pytest.raises(DataError, match=r"the snapshot is not in .*hub \(run the acquire stage") as err:
        local_snapshot(spec)
    assert "\n" not in str(err.value)
    snapshot_model(_spec(tmp_path), endpoint=hub)
    config = next((tmp_path / "hub").rglob("config.json"))
    config.unlink()                                          # a snapshot that lost a file
    with pytest.raises(DataError, match=r"config.json \(of the snapshot\) is not in"):
        local_snapshot(_spec(tmp_path))


def test_allow_patterns_fetch_only_the_files_loaded_and_the_offline_lookup_accepts_them(hub, hub_model_dir,
                                                                                       tmp_path):
    (hub_model_dir / "tf_model.h5").write_bytes(b"a TensorFlow copy nobody loads")
    try:
        spec = _spec(tmp_path, allow_patterns=["*.json", "*.safetensors"])
        info = snapshot_model(spec, endpoint=hub)
        got = {p.name for p in Path(info["path"]).iterdir()}
        assert "tf_model.h5" not in got and "config.json" in got and any(n.endswith(".safetensors") for n in got)
        assert local_snapshot(spec) == Path(info["path"])
        with pytest.raises(DataError, match="not in"):
            local_snapshot(_spec(tmp_path))              # the whole repository was never fetched
    finally:
        (hub_model_dir / "tf_model.h5").unlink()


def test_unpinned_revision_and_wrong_arch_are_refused(hub, tmp_path):
    with pytest.raises(DataError, match="40-hex commit, got 'main'"):
        snapshot_model(_spec(tmp_path, revision="main"), endpoint=hub)
    assert HubHandler.requests == []                          # refused before any request
    with pytest.raises(DataError, match="hidden_size 3584 != 32"):
        snapshot_model(_spec(tmp_path, arch={**ARCH, "hidden_size": 3584}), endpoint=hub)


def test_git_blob_pin_is_the_git_object_id(tmp_path):
    import subprocess

    path = tmp_path / "test.jsonl"
    path.write_bytes(b'{"problem": "1 + 1", "answer": "2"}\n' * 100)
    git = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    assert git_blob_sha1(path) == git
    assert check_content(path, "test", git_blob=git) == hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(DataError, match="git blob id"):
        check_content(path, "test", git_blob="0" * 40)


def test_the_acquire_stage_fetches_the_pinned_model_with_the_data(hub, hub_dataset_dir, tmp_path):
    """core.lm.stages.acquire at full scale (`source: hub`): the split files and the model snapshot
    (model.endpoint: the loopback hub as a mirror)."""
    from types import SimpleNamespace

    from iclr26.core.lm.stages import acquire

    splits = {"test": {"hub_id": str(hub_dataset_dir), "file": "test.jsonl"}}
    cfg = {"data": {"math": {"source": "hub", "splits": splits}}, "model": _spec(tmp_path, endpoint=hub)}
    job = SimpleNamespace(cfg=cfg, dataset="math", out_dir=tmp_path / "raw")
    info = acquire(job, ("test",))
    assert info["test"]["rows"] == 9 and (tmp_path / "raw" / "test.jsonl").exists()
    assert info["model"]["revision"] == HubHandler.commit and info["model"]["bytes"] > 0
    assert local_snapshot(_spec(tmp_path)) == Path(info["model"]["path"])


def test_md5_pin_is_checked_and_the_sha256_recorded(server, tmp_path):
    """A host that publishes md5 only (Zenodo): the md5 is checked, the manifest gets the sha256."""
    from iclr26.core.acquire import download_pinned

    url, _ = server
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    got = download_pinned({"url": f"{url}/data.bin", "md5": md5}, tmp_path / "data.bin", backoff=0)
    assert got["sha256"] == SHA and (tmp_path / "data.bin").read_bytes() == PAYLOAD
    with pytest.raises(DataError, match="md5 mismatch"):
        download(f"{url}/data.bin", tmp_path / "other.bin", None, md5="0" * 32, backoff=0)
    assert not (tmp_path / "other.bin").exists() and not (tmp_path / "other.bin.part").exists()
    with pytest.raises(DataError, match="no sha256 or md5"):
        download_pinned({"url": f"{url}/data.bin"}, tmp_path / "x.bin")


def test_preflight_accepts_an_md5_pinned_url_only():
    from iclr26.core.preflight import external_sources

    def problem(pin):
        return external_sources({"data": {"d": {"url": "https://zenodo.org/x.7z", **pin}}})[0]["problem"]

    assert problem({"md5": "c8b05bc7acdb13895bb3c6a29608667e"}) is None
    assert problem({"md5": "c8b05bc7"}) is not None and problem({}) is not None
