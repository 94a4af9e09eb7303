#!/usr/bin/env bash
# On a GPU machine: runs what scripts/gpu_build.sh staged, in one go (about 2 minutes on an H200
# on 2026-11-27; the budgets below cap the benchmark steps), and prints a summary table.
#
#   scripts/gpu_check.sh [STAGE_DIR] [OUT_DIR]   (defaults: build-gpu/stage, $OUT or
#                                                 build-gpu/out)
#
# 1. every CUDA test (STAGE_DIR/tests);
# 2. every CUDA benchmark (STAGE_DIR/bench), JSON into OUT_DIR (CUDA-event times);
#    bench_cuda_flash runs its default rows (POSENC_FLASH_BENCH=full: every row) and needs
#    the toolkit's shared cuBLAS: the folder that holds it (next to nvcc, /usr/local/cuda,
#    or torch's nvidia wheels) goes on LD_LIBRARY_PATH;
# 3. bench/compare_torch_cuda.py: PyTorch's copy, RoPE (eager, torch.compile), sinusoid
#    table and attention (SDPA backends, FlexAttention, GQA decode) on the same shapes, and
#    the ratio tables against the benchmarks of step 2 (issue 24's flash goals);
# 4. compute-sanitizer --tool memcheck on every test, and --tool racecheck on those whose
#    kernels share memory between threads (RoPE, flash). test_cuda_flash runs under the
#    sanitizers on a subset of its test cases (the Catch2 filters below: memcheck every
#    case but the largest float one, racecheck the mask, RoPE and 16-bit cases);
#    POSENC_SANITIZE_FULL=1 runs every case under both. The sanitizers come last because
#    they are the slowest step and need no quiet machine.
# Time knobs (device time is short): POSENC_FLASH_BENCH_BUDGET (s, default 150) and
# POSENC_TORCH_BUDGET (s, default 150) stop starting new benchmark rows; POSENC_CHECK_DEADLINE
# (s since the start, default none) starts no sanitizer run that could end past it and
# lists it as "not run", so the summary prints before the device tool's own time limit.
# Each step's log is in OUT_DIR; the exit status is non-zero when a test or a sanitizer
# failed, or a sanitizer run was left out for the deadline.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
stage="${1:-build-gpu/stage}"
out="${2:-${OUT:-build-gpu/out}}"
mkdir -p "$out"
stage_abs="$(cd "$stage" && pwd)" || { echo "gpu_check: no stage folder $stage" >&2; exit 2; }
export LD_LIBRARY_PATH="$stage_abs/lib:${LD_LIBRARY_PATH:-}"
start=$SECONDS
failed=0
rows=()
row() { rows+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  | tee "$out/gpu.txt" || echo "nvidia-smi failed" | tee "$out/gpu.txt"
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

# The shared libraries the staged binaries need beyond lib/ (cuBLAS for bench_cuda_flash),
# each looked for next to nvcc, in /usr/local/cuda and in torch's nvidia wheels.
lib_dirs=()
nvcc_path="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
nvcc_dir="$(dirname "$(readlink -f "$nvcc_path")")"
for d in "${CUDA_HOME:-/nonexistent}/lib64" "$nvcc_dir/../lib64" "$nvcc_dir/../lib" \
  /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  if [[ -d "$d" ]]; then lib_dirs+=("$(cd "$d" && pwd)"); fi
done
while IFS= read -r d; do
  if [[ -d "$d" ]]; then lib_dirs+=("$d"); fi
done < <(python3 -c '
import os, nvidia
for p in nvidia.__path__:
    for sub in sorted(os.listdir(p)):
        print(os.path.join(p, sub, "lib"))' 2>/dev/null)
missing=$(for b in "$stage"/bench/* "$stage"/tests/* "$stage"/examples/*; do
  if [[ -f "$b" && -x "$b" ]]; then ldd "$b" 2>/dev/null | awk '/not found/ {print $1}'; fi
done | sort -u)
for lib in $missing; do
  found=""
  for d in "${lib_dirs[@]}"; do
    if [[ -e "$d/$lib" ]]; then found="$d"; break; fi
  done
  if [[ -n "$found" ]]; then
    export LD_LIBRARY_PATH="$found:$LD_LIBRARY_PATH"
    row "$lib" found "$found"
  else
    row "$lib" MISSING "not next to nvcc, in /usr/local/cuda or torch's wheels"
  fi
done

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
# --benchmark_min_time in seconds as a plain number: the staged Google Benchmark (Debian's
# 1.7.1) rejects 1.8's "0.05s" form. bench_cuda_flash sets its own iteration counts and
# starts no row after POSENC_FLASH_BENCH_BUDGET seconds (150 here).
for b in "$stage"/bench/bench_cuda_*; do
  [[ -x "$b" ]] || continue
  name=$(basename "$b")
  limit=240
  if [[ "$name" == bench_cuda_flash ]]; then limit=300; fi
  s=$SECONDS
  POSENC_FLASH_BENCH_BUDGET="${POSENC_FLASH_BENCH_BUDGET:-150}" timeout "$limit" "$b" --benchmark_format=console --benchmark_out="$out/$name.json" \
    --benchmark_out_format=json --benchmark_min_time=0.05 > "$out/$name.log" 2>&1
  rc=$?
  if [[ $rc == 0 ]]; then
    row "$name" ran "$((SECONDS - s)) s (log: $out/$name.log)"
  else
    row "$name" FAIL "exit $rc after $((SECONDS - s)) s, see $out/$name.log"
    failed=1
  fi
done
# the flash rows, one line each, in the summary
if [[ -f "$out/bench_cuda_flash.json" ]]; then
  while IFS= read -r line; do rows+=("$line"); done < <(python3 - "$out/bench_cuda_flash.json" <<'PY'
import json, re, sys
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        benchmarks = json.load(f).get("benchmarks", [])
except (OSError, ValueError) as e:
    print("%-44s %-8s %s" % ("bench_cuda_flash.json", "FAIL", e))
    sys.exit(0)
for b in benchmarks:
    name = re.sub(r"/iterations:\d+|/manual_time", "", b["name"]).replace("BM_", "", 1)
    if b.get("error_occurred"):
        print("%-44s %-8s %s" % (name, "skipped", b.get("error_message", "")))
        continue
    figures = ["%s %.3g" % (k, b[k]) for k in ("TFLOP/s", "vs_cublas", "vs_none", "TB/s",
                                                "vs_copy") if k in b]
    print("%-44s %-8s %s" % (name, "ran", ", ".join(figures)))
PY
  )
fi

if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  s=$SECONDS
  timeout 300 python3 bench/compare_torch_cuda.py --posenc-json "$out" --time-budget "${POSENC_TORCH_BUDGET:-150}" \
    > "$out/compare_torch_cuda.log" 2>&1
  rc=$?
  row compare_torch_cuda.py "$([[ $rc == 0 ]] && echo ran || echo FAIL)" "$((SECONDS - s)) s"
  [[ $rc == 0 ]] || failed=1
else
  row compare_torch_cuda.py skipped "torch with CUDA not importable"
fi

if [[ -x "$sanitizer" ]]; then
  for t in "$stage"/tests/test_cuda_*; do
    name=$(basename "$t")
    tools=(memcheck)
    case "$name" in *rotary* | *flash*) tools+=(racecheck) ;; esac
    for tool in "${tools[@]}"; do
      # Catch2 test specs: the flash test's cases that fit the time under each tool
      filter=()
      if [[ "$name" == test_cuda_flash && -z "${POSENC_SANITIZE_FULL:-}" ]]; then
        case $tool in
          memcheck) filter=("~cuda flash: every scheme*") ;;
          racecheck) filter=("cuda flash: boolean*,cuda flash: RoPE scalings*,cuda flash: double*") ;;
        esac
      fi
      # test_cuda_runtime asks for 2^62 bytes and launches bad kernels on purpose (the
      # errors must become posenc::error): the API errors it provokes are not reported
      api=()
      if [[ "$name" == test_cuda_runtime ]]; then api=(--report-api-errors no); fi
      what="$name $tool"
      if [[ ${#filter[@]} -gt 0 ]]; then what="$what (subset)"; fi
      limit=240
      if [[ -n "${POSENC_CHECK_DEADLINE:-}" ]]; then
        left=$((POSENC_CHECK_DEADLINE - (SECONDS - start) - 5))
        if ((left < 30)); then row "$what" "not run" "deadline"; failed=1; continue; fi
        ((left < limit)) && limit=$left
      fi
      s=$SECONDS
      timeout "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 "${api[@]}" "$t" \
        "${filter[@]}" > "$out/$name.$tool.log" 2>&1
      rc=$?
      summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/$name.$tool.log" | tail -1)
      if [[ $rc == 0 ]]; then row "$what" clean "$((SECONDS - s)) s, ${summary:-no summary}"
      else row "$what" FAIL "exit $rc, ${summary:-see $out/$name.$tool.log}"; failed=1; fi
    done
  done
else
  row compute-sanitizer missing "not found: memcheck not run"
  failed=1
fi

echo
echo "== gpu_check summary ($(cat "$out/gpu.txt"), $((SECONDS - start)) s)"
printf '%s\n' "${rows[@]}"
echo
for b in "$out"/bench_cuda_*.log; do [[ -f "$b" ]] && { echo "== $(basename "$b" .log)"; grep -E "^(BM_|-|Benchmark)" "$b"; }; done
[[ -f "$out/compare_torch_cuda.log" ]] && { echo "== compare_torch_cuda"; cat "$out/compare_torch_cuda.log"; }
exit $failed
