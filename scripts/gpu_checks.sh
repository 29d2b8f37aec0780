#!/usr/bin/env bash
# The checks to run the next time a GPU is at hand, in one go (about 8 minutes on an 80 GB H100/H200-class card,
# most of it the step benchmark), from the repository root, in an environment with torch (CUDA), transformers
# and pytest:
#
#     bash scripts/gpu_checks.sh [results-folder]      # default: $OUT, else gpu-results
#
# 1. the environment (GPU, driver, torch, transformers);
# 2. the CUDA tests of the fixed-shape forward (graph replay == eager call, greedy speculative == AR on the GPU);
# 3. the step benchmark: the 8B-shaped pair first (the bars: step within 1.5x of the bound, c <= 0.15), then the
#    1B and 3B shapes, bfloat16, JSON beside the printed report.
# Each step has its own time limit and a failure does not stop the next one; everything printed goes to the
# results folder too.
set -u
out="${1:-${OUT:-gpu-results}}"
mkdir -p "$out"

python - <<'EOF' 2>&1 | tee "$out/environment.txt"
import platform, torch, transformers
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"transformers {transformers.__version__}")
for index in range(torch.cuda.device_count()):
    props = torch.cuda.get_device_properties(index)
    print(f"cuda:{index} {props.name}, {props.total_memory / 2**30:.0f} GiB, capability {props.major}.{props.minor}")
if not torch.cuda.is_available():
    print("no CUDA device: the checks below will skip or stop")
EOF

timeout 240 python -m pytest -q -p no:cacheprovider tests/engine/test_fixed_shape.py 2>&1 | tee "$out/cuda_tests.txt"

timeout 540 python -m scripts.cuda_step_bench --pairs 8B:1B,1B:1B/4,3B:1B --json "$out/cuda_step_bench.json" 2>&1 \
    | tee "$out/cuda_step_bench.txt"
echo "results in $out"
