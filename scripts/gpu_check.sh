#!/usr/bin/env bash
# On a GPU machine: runs what scripts/gpu_build.sh staged, in one go (under 6 minutes on an
# H100/H200), and prints a summary table.
#
#   scripts/gpu_check.sh [STAGE_DIR] [OUT_DIR]   (defaults: build-gpu/stage, $OUT or
#                                                 build-gpu/out)
#
# 1. every CUDA test (STAGE_DIR/tests), then compute-sanitizer --tool memcheck on each, and
#    --tool racecheck on those whose kernels share memory between threads (RoPE, flash);
# 2. every CUDA benchmark (STAGE_DIR/bench), JSON into OUT_DIR (CUDA-event times);
# 3. bench/compare_torch_cuda.py: PyTorch's copy, RoPE (eager, torch.compile) and sinusoid
#    table on the same shapes, and the ratio table against the benchmarks of step 2.
# Each step's log is in OUT_DIR; the exit status is non-zero when a test or a sanitizer
# failed.
set -uo pipefail
cd "$(dirname "$0")/.."
stage="${1:-build-gpu/stage}"
out="${2:-${OUT:-build-gpu/out}}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$stage/lib:${LD_LIBRARY_PATH:-}"
start=$SECONDS
failed=0
rows=()
row() { rows+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  | tee "$out/gpu.txt" || echo "nvidia-smi failed" | tee "$out/gpu.txt"
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

for t in "$stage"/tests/test_cuda_*; do
  name=$(basename "$t")
  s=$SECONDS
  timeout 180 "$t" > "$out/$name.log" 2>&1
  rc=$?
  case $rc in
    0) row "$name" pass "$((SECONDS - s)) s, $(grep -o '[0-9]* assertions' "$out/$name.log" | head -1)" ;;
    77) row "$name" SKIP "$(head -1 "$out/$name.log")"; failed=1 ;;
    *) row "$name" FAIL "exit $rc (log: $out/$name.log)"; failed=1 ;;
  esac
done
if [[ -x "$sanitizer" ]]; then
  for t in "$stage"/tests/test_cuda_*; do
    name=$(basename "$t")
    tools=(memcheck)
    case "$name" in *rotary* | *flash*) tools+=(racecheck) ;; esac
    for tool in "${tools[@]}"; do
      s=$SECONDS
      timeout 240 "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 "$t" \
        > "$out/$name.$tool.log" 2>&1
      rc=$?
      summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/$name.$tool.log" | tail -1)
      if [[ $rc == 0 ]]; then row "$name $tool" clean "$((SECONDS - s)) s, ${summary:-no summary}"
      else row "$name $tool" FAIL "exit $rc, ${summary:-see $out/$name.$tool.log}"; failed=1; fi
    done
  done
else
  row compute-sanitizer missing "not found: memcheck not run"
  failed=1
fi

for b in "$stage"/bench/bench_cuda_*; do
  [[ -x "$b" ]] || continue
  name=$(basename "$b")
  s=$SECONDS
  if timeout 240 "$b" --benchmark_format=console --benchmark_out="$out/$name.json" \
      --benchmark_out_format=json --benchmark_min_time=0.05s > "$out/$name.log" 2>&1; then
    row "$name" ran "$((SECONDS - s)) s (log: $out/$name.log)"
  else
    row "$name" FAIL "see $out/$name.log"
    failed=1
  fi
done

if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  s=$SECONDS
  timeout 240 python3 bench/compare_torch_cuda.py --posenc-json "$out" > "$out/compare_torch_cuda.log" 2>&1
  rc=$?
  row compare_torch_cuda.py "$([[ $rc == 0 ]] && echo ran || echo FAIL)" "$((SECONDS - s)) s"
  [[ $rc == 0 ]] || failed=1
else
  row compare_torch_cuda.py skipped "torch with CUDA not importable"
fi

echo
echo "== gpu_check summary ($(cat "$out/gpu.txt"), $((SECONDS - start)) s)"
printf '%s\n' "${rows[@]}"
echo
for b in "$out"/bench_cuda_*.log; do [[ -f "$b" ]] && { echo "== $(basename "$b" .log)"; grep -E "^(BM_|-|Benchmark)" "$b"; }; done
[[ -f "$out/compare_torch_cuda.log" ]] && { echo "== compare_torch_cuda"; cat "$out/compare_torch_cuda.log"; }
exit $failed
