"""The full-scale acquisition path, exercised offline against a loopback HTTP server."""
import hashlib
import http.server
import threading

import pytest

from iclr26.core.acquire import download, from_pretrained
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
