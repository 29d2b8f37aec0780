"""The speech server (`ssd_demo.server`) on a free loopback port in a thread, for tests that call it over HTTP."""

from __future__ import annotations

import socket
import threading
import time


def serve_in_thread(service):
    """(server, thread, base URL) once the server answers; stop it with `server.should_exit = True`."""
    import uvicorn

    from ssd_demo.server.openai_api import build_speech_api

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_speech_api(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"
