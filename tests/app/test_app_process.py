"""`python app.py` as a host runs it: a stop (SIGTERM, Ctrl-C) while the start-up job is still decoding ends the
process cleanly, not with an abort from torch's or ONNX Runtime's threads."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from support.paths import REPOSITORY


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_during_the_first_warm_up_exits_cleanly(tmp_path, stop):
    port = _free_port()
    # An empty cache of measured costs: the start-up job measures this machine, so it is still decoding below.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_SERVER_PORT": str(port), "SSD_DEMO_CACHE": str(tmp_path / "c"),
           "SSD_DEMO_DATA_DIR": str(tmp_path / "data")}
    app = subprocess.Popen([sys.executable, "app.py"], cwd=REPOSITORY, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert app.poll() is None, app.communicate()[1][-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}", timeout=5):
                    break
            except OSError:
                time.sleep(0.2)
        time.sleep(1.0)  # the start-up job is loading, warming up or measuring now
        app.send_signal(stop)
        _, stderr = app.communicate(timeout=60)
    finally:
        if app.poll() is None:
            app.kill()
            app.communicate()
    assert app.returncode == 0, stderr[-2000:]
    assert "terminate called" not in stderr
