"""A server under test as a subprocess: started on a free 127.0.0.1 port and waited for until ready, stopped (and
never outliving the benchmark); and ours' engine counters, read from its /metrics."""
import os
import re
import signal
import socket
import subprocess
import time


def _libc():
    try:
        import ctypes
        return ctypes.CDLL(None)   # opened here, in the parent: the child between fork and exec only calls it
    except OSError:
        return None


_LIBC = _libc()


def _die_with_parent():
    """In the child before exec: SIGTERM when this benchmark dies (Linux prctl PR_SET_PDEATHSIG), so that no
    server outlives it even when it is killed outright."""
    try:
        _LIBC.prctl(1, signal.SIGTERM)
    except Exception:  # noqa: BLE001 - not Linux: the finally blocks still stop it
        pass


class Server:
    """A server subprocess: its output goes to a log file; `port` once it printed its listening line and
    `ready_path` answered 200 (at most `timeout` seconds): ours' /ready, llama-server's /health."""

    def __init__(self, name, argv, env, folder, timeout, ready_path="/ready"):
        self.name, self.ready_path = name, ready_path
        self.log_path = os.path.join(folder, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                        preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        self.port = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with code {self.process.returncode}:\n{self.output()[-3000:]}")
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.output())
            if found and self.ready(int(found.group(1)), ready_path):
                self.port = int(found.group(1))
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{name} was not ready within {timeout:g} s:\n{self.output()[-3000:]}")

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    @staticmethod
    def ready(port, path="/ready"):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
                return s.recv(64).split(b" ")[1] == b"200"
        except (OSError, IndexError):
            return False

    def get(self, path):
        """The body of GET path (the server's /metrics)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data.split(b"\r\n\r\n", 1)[-1].decode("utf-8", "replace")

    def stop(self, timeout=20.0):
        """SIGTERM (ours drains, uvicorn stops), then SIGKILL after `timeout` seconds; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode


def engine_counters(text):
    """The engine's counters from ours' /metrics: tokens, steps, step seconds, rejected."""
    out = {}
    for name, key in (("ctransformer_tokens_total", "tokens"), ("ctransformer_steps_total", "steps"),
                      ("ctransformer_step_seconds_sum", "step_seconds"), ("ctransformer_rejected_total", "rejected")):
        found = re.search(rf"^{name} ([0-9.eE+-]+)$", text, re.M)
        if found:
            out[key] = float(found.group(1))
    return out
