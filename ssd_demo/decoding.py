"""The decoders under their first public name: `from ssd_demo.decoding import speculative_generate` keeps
working. The code lives in `ssd_demo.engine`."""

from .engine import *  # noqa: F401,F403
from .engine import __all__  # noqa: F401
