"""ctransformer.data.fetch: lookup order, download into the cache, and every way a download can fail.

Downloads come from a local HTTP server on 127.0.0.1 (a thread of the test) through
CTRANSFORMER_DATA_MIRROR, serving the shared data files; no other network is used. Each test runs with
CTRANSFORMER_DATA unset, ../shared/data hidden (paths.shared_data_dir monkeypatched) and the cache in
a temporary folder.
"""
import dataclasses
import gzip
import hashlib
import http.server
import pathlib
import socket
import threading

import pytest

from ctransformer.data import CharDataset, DataFetchError, FILES, cache_dir, data_dir, fetch
from ctransformer.data import download, paths, registry

SHARED = paths.shared_data_dir()
find_shared = paths.shared_data_dir
pytestmark = pytest.mark.skipif(SHARED is None, reason="the tests serve the files of ../shared/data")

SHAKESPEARE = "tinyshakespeare/input.txt.gz"
VAL_DE = "multi30k/val.de.gz"


def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def files_under(folder):
    return sorted(p for p in pathlib.Path(folder).rglob("*") if p.is_file())


class Server:
    """Serves ../shared/data (plus `extra` bodies) over HTTP/1.0; `truncate` or `corrupt` spoil the next replies."""

    def __init__(self):
        self.requests, self.extra, self.truncate, self.corrupt = [], {}, False, False
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                name = self.path.lstrip("/")
                if name in outer.extra:
                    body = outer.extra[name]
                elif name in FILES:
                    body = (SHARED / name).read_bytes()
                else:
                    self.send_error(404)
                    return
                if outer.corrupt:
                    body = body[:100] + bytes([body[100] ^ 1]) + body[101:]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # Announces the whole body, sends half, then the connection closes.
                self.wfile.write(body[: len(body) // 2] if outer.truncate else body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll so shutdown() does not wait the default half second per test.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture(autouse=True)
def plain_clone(tmp_path, monkeypatch):
    """No $CTRANSFORMER_DATA, no ../shared/data, an empty cache, no proxy between us and 127.0.0.1."""
    for name in ["CTRANSFORMER_DATA", "CTRANSFORMER_DATA_MIRROR", "http_proxy", "HTTP_PROXY", "https_proxy",
                 "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(paths, "shared_data_dir", lambda: None)
    monkeypatch.setattr(download, "_checked", {})  # each test starts as a fresh process
    monkeypatch.chdir(tmp_path)
    return tmp_path / "xdg" / "ctransformer"


@pytest.fixture
def server(monkeypatch):
    s = Server()
    monkeypatch.setenv("CTRANSFORMER_DATA_MIRROR", s.url + "/")  # a trailing slash is allowed
    yield s
    s.close()


@pytest.fixture
def closed_port_url():
    # A port that was just free: connecting to it is refused, as when offline.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_registry_matches_the_shared_files():
    assert sorted(FILES) == sorted(str(p.relative_to(SHARED)) for p in SHARED.rglob("*.gz"))
    for entry in FILES.values():
        stored = (SHARED / entry.path).read_bytes()
        content = gzip.decompress(stored)
        assert (len(stored), hashlib.sha256(stored).hexdigest()) == (entry.size, entry.sha256), entry.path
        assert (len(content), hashlib.sha256(content).hexdigest()) == (entry.content_size, entry.content_sha256)
    assert FILES[SHAKESPEARE].url == ("https://raw.githubusercontent.com/karpathy/char-rnn/"
                                      "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/input.txt")
    assert FILES["multi30k/test2016.de.gz"].url == (
        "https://raw.githubusercontent.com/multi30k/dataset/"
        "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw/test_2016_flickr.de.gz")
    assert [e.path for e in FILES.values() if e.source_is_text] == [SHAKESPEARE]


def test_fetch_downloads_into_the_cache_once(server, plain_clone):
    path = fetch(VAL_DE)
    assert path == plain_clone / VAL_DE
    assert sha256(path) == FILES[VAL_DE].sha256
    assert server.requests == ["/" + VAL_DE]
    assert files_under(plain_clone) == [path]  # no temporary file left beside it
    assert fetch(VAL_DE) == path
    download._checked.clear()  # a new process checks the cached copy again, without downloading
    assert fetch(VAL_DE) == path
    assert server.requests == ["/" + VAL_DE]


def test_char_dataset_works_on_a_plain_clone(server, plain_clone):
    data = CharDataset()
    assert data.vocab_size == 65 and len(data.train) + len(data.val) == 1115394
    assert server.requests == ["/" + SHAKESPEARE]
    assert sha256(plain_clone / SHAKESPEARE) == FILES[SHAKESPEARE].sha256  # the mirror's .gz, as is


def test_canonical_text_source_is_checked_raw_and_stored_gzipped(server, plain_clone, monkeypatch):
    """Tiny Shakespeare's canonical URL serves the uncompressed text: it is checked against the uncompressed
    sha256 and stored gzip-compressed under the standard name."""
    monkeypatch.delenv("CTRANSFORMER_DATA_MIRROR")
    text = gzip.decompress((SHARED / SHAKESPEARE).read_bytes())
    server.extra["char-rnn/input.txt"] = text
    entry = FILES[SHAKESPEARE]
    monkeypatch.setitem(registry.FILES, SHAKESPEARE, dataclasses.replace(entry, url=server.url + "/char-rnn/input.txt"))
    path = fetch(SHAKESPEARE)
    assert path == plain_clone / SHAKESPEARE
    assert gzip.decompress(path.read_bytes()) == text
    assert server.requests == ["/char-rnn/input.txt"]
    # A raw text that is not the expected one is refused by the uncompressed checksum.
    path.unlink()
    server.extra["char-rnn/input.txt"] = text.replace(b"First Citizen", b"First Citizen".upper(), 1)
    with pytest.raises(DataFetchError, match=f"checksum mismatch.*{entry.content_sha256}"):
        fetch(SHAKESPEARE)
    assert files_under(plain_clone) == []


def test_lookup_order_env_then_shared_then_cache_then_download(server, plain_clone, tmp_path, monkeypatch):
    copies = {name: tmp_path / name / SHAKESPEARE for name in ["env", "shared/data", "xdg/ctransformer"]}
    for copy in copies.values():
        copy.parent.mkdir(parents=True)
        copy.write_bytes((SHARED / SHAKESPEARE).read_bytes())
    (tmp_path / "empty").mkdir()
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")  # so the real lookup finds ../shared/data from the cwd
    monkeypatch.setattr(paths, "shared_data_dir", find_shared)

    monkeypatch.setenv("CTRANSFORMER_DATA", str(tmp_path / "env"))
    assert fetch(SHAKESPEARE) == copies["env"]
    monkeypatch.setenv("CTRANSFORMER_DATA", str(tmp_path / "empty"))  # lacks the file: the next folder has it
    assert fetch(SHAKESPEARE).resolve() == copies["shared/data"]
    monkeypatch.delenv("CTRANSFORMER_DATA")
    assert fetch(SHAKESPEARE).resolve() == copies["shared/data"]
    monkeypatch.setattr(paths, "shared_data_dir", lambda: None)
    assert fetch(SHAKESPEARE) == copies["xdg/ctransformer"]
    assert server.requests == []
    copies["xdg/ctransformer"].unlink()
    assert fetch(SHAKESPEARE) == copies["xdg/ctransformer"]
    assert server.requests == ["/" + SHAKESPEARE]


def test_an_interrupted_transfer_leaves_nothing_and_a_retry_succeeds(server, plain_clone):
    server.truncate = True
    url = f"{server.url}/{VAL_DE}"
    size = FILES[VAL_DE].size
    with pytest.raises(DataFetchError, match=f"interrupted after {size // 2} of {size} bytes") as caught:
        fetch(VAL_DE)
    assert url in str(caught.value) and FILES[VAL_DE].sha256 in str(caught.value)
    assert files_under(plain_clone) == []
    server.truncate = False
    assert sha256(fetch(VAL_DE)) == FILES[VAL_DE].sha256
    assert len(server.requests) == 2


def test_a_corrupt_download_is_refused_and_leaves_nothing(server, plain_clone):
    server.corrupt = True
    with pytest.raises(DataFetchError) as caught:
        fetch(VAL_DE)
    message, entry = str(caught.value), FILES[VAL_DE]
    assert "checksum mismatch" in message
    for expected in [f"{server.url}/{VAL_DE}", entry.sha256, "CTRANSFORMER_DATA ", "CTRANSFORMER_DATA_MIRROR"]:
        assert expected in message
    assert isinstance(caught.value, OSError)
    assert (caught.value.path, caught.value.url, caught.value.expected_sha256) == (VAL_DE, f"{server.url}/{VAL_DE}",
                                                                                   entry.sha256)
    assert files_under(plain_clone) == []


def test_offline_names_the_url_and_the_variables(closed_port_url, plain_clone, monkeypatch):
    monkeypatch.setenv("CTRANSFORMER_DATA_MIRROR", closed_port_url)
    with pytest.raises(DataFetchError) as caught:
        fetch(SHAKESPEARE)
    message = str(caught.value)
    for expected in [f"{closed_port_url}/{SHAKESPEARE}", "refused", FILES[SHAKESPEARE].sha256,
                     "CTRANSFORMER_DATA ", "CTRANSFORMER_DATA_MIRROR"]:
        assert expected in message
    assert files_under(plain_clone) == []


def test_an_http_error_names_its_status(server, plain_clone, monkeypatch):
    monkeypatch.setenv("CTRANSFORMER_DATA_MIRROR", server.url + "/nowhere")
    with pytest.raises(DataFetchError, match=f"HTTP 404.*{server.url}/nowhere/{VAL_DE}"):
        fetch(VAL_DE)
    assert files_under(plain_clone) == []


def test_ctrl_c_during_a_download_leaves_nothing(server, plain_clone, monkeypatch):
    class InterruptedBar:
        def __enter__(self):
            return self

        def __exit__(self, *args):
            return False

        def update(self, n):
            raise KeyboardInterrupt

    monkeypatch.setattr(download, "_progress", lambda total, description: InterruptedBar())
    with pytest.raises(KeyboardInterrupt):
        fetch(VAL_DE)
    assert server.requests == ["/" + VAL_DE]
    assert files_under(plain_clone) == []


@pytest.mark.parametrize("spoil", ["truncate", "other text"])
def test_a_bad_local_copy_is_an_error_not_data(server, plain_clone, spoil):
    bad = plain_clone / VAL_DE
    bad.parent.mkdir(parents=True)
    good = (SHARED / VAL_DE).read_bytes()
    bad.write_bytes(good[:1000] if spoil == "truncate" else gzip.compress(b"Ein Hund.\n"))
    with pytest.raises(DataFetchError) as caught:
        fetch(VAL_DE)
    assert str(bad) in str(caught.value) and FILES[VAL_DE].content_sha256 in str(caught.value)
    assert server.requests == []  # reported, not silently replaced


def test_an_unknown_path_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown data file 'multi30k/test.de.gz': expected one of .*test2016.de.gz"):
        fetch("multi30k/test.de.gz")


def test_a_data_variable_that_is_not_a_folder_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CTRANSFORMER_DATA", str(tmp_path / "typo"))
    with pytest.raises(NotADirectoryError, match="CTRANSFORMER_DATA=.*typo"):
        fetch(SHAKESPEARE)


def test_cache_dir_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "ctransformer"
    for ignored in ["", "relative/cache"]:
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert cache_dir() == tmp_path / "home" / ".cache" / "ctransformer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == tmp_path / "home" / ".cache" / "ctransformer"


def test_data_dir_keeps_its_meaning(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="CTRANSFORMER_DATA"):
        data_dir()
    monkeypatch.setattr(paths, "shared_data_dir", find_shared)
    assert data_dir() == SHARED
    monkeypatch.setenv("CTRANSFORMER_DATA", str(tmp_path))
    assert data_dir() == tmp_path
