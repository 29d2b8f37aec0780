"""Hugging Face Space / local entry point: `python app.py`.

Builds the page from `ssd_demo.app.page`, starts getting the machine ready in the background
(`ssd_demo.comparison.startup`) and launches it. `python app.py --study NAME` (repeatable, or
`SSD_DEMO_STUDY=NAME[,NAME]`) serves only the rater page of those listening studies, with the
experimenter's page at /admin; `python app.py --help` prints the flags. Honours GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT; Gradio's analytics are off unless GRADIO_ANALYTICS_ENABLED says otherwise.
"""

import atexit
import os
import signal
import sys

USAGE = """usage: python app.py [--study NAME ...]

The Gradio demo: Compare and Benchmark tabs, the listening test.

options:
  -h, --help     show this help and exit (nothing is loaded or started)
  --study NAME   serve only the rater page of the listening study NAME (repeatable; or
                 SSD_DEMO_STUDY=NAME[,NAME]); the experimenter's page is /admin, on with
                 SSD_DEMO_RESULTS_TOKEN. Create a study first: python -m ssd_demo study create FILE

environment: GRADIO_SERVER_NAME (default 127.0.0.1), GRADIO_SERVER_PORT (default 7860),
SSD_DEMO_DATA_DIR, SSD_DEMO_LISTENING_DB, SSD_DEMO_ENGINE (ours or vllm: the Llasa presets' speech LM in
vLLM), GRADIO_ANALYTICS_ENABLED (default False).
"""

if __name__ == "__main__" and {"-h", "--help"} & set(sys.argv[1:]):
    print(USAGE, end="")
    sys.exit(0)

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

try:  # ZeroGPU Spaces want `spaces` imported before torch initialises CUDA.
    import spaces  # noqa: F401
except ImportError:
    pass

from ssd_demo.app.page import build_demo, launch_options  # noqa: E402
from ssd_demo.app.listening.study_service import served_studies  # noqa: E402
from ssd_demo.comparison import get_ready_in_background  # noqa: E402
from ssd_demo.backends.registry import list_presets  # noqa: E402

STUDIES = served_studies()
if STUDIES:  # a rater-only page: no model to get ready
    from ssd_demo.app.listening.study_page import build_study_demo, study_launch_options

    demo, launch_options = build_study_demo(STUDIES), study_launch_options
else:
    demo = build_demo()
    # The first race should be as quick as the next ones: warm up and measure this machine's costs now, in
    # the background, for the preset the page opens with (the page says so until it is done).
    get_ready_in_background(list_presets()[0].key)


def exit_without_teardown() -> None:
    """Run the exit handlers (the rater server's clip copies are removed), then end the process without tearing the
    interpreter down: a decoding thread (the start-up job, a race) may still be inside torch or ONNX Runtime, whose
    thread pools abort the process ("terminate called without an active exception") when destroyed under it."""
    atexit._run_exitfuncs()  # the interpreter's own exit runs these; os._exit below does not
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    # A stop by the host (SIGTERM: a container, a Space restart) exits like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    try:
        demo.launch(
            server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
            server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
            **launch_options(),
        )
    except (SystemExit, KeyboardInterrupt):
        pass
    exit_without_teardown()
