#!/usr/bin/env bash
# Fuzzing: builds the harnesses of tests/fuzz (the .npy, .safetensors and GGUF readers,
# Hugging Face config.json text, the CLI's argument parser) with clang++, libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer (-O1 -g, -fno-sanitize-recover=all: any
# report aborts), then runs each for FUZZ_SECONDS on a fresh copy of its seed corpus
# (tests/fuzz/corpus/<harness>/) with its dictionary of tokens (tests/fuzz/dict/), two
# harnesses at a time (FUZZ_PARALLEL). Each run is bounded: -timeout=10 (an input slower
# than 10 s is a finding), -rss_limit_mb=1024 (so is a process above 1 GiB, or one
# allocation above it), -max_len per harness.
#
# Prints the executions per harness (libFuzzer's final stat::number_of_executed_units) and a
# summary; fails when any harness found a crash, a sanitizer report, a timeout or an
# out-of-memory. Its input is then in <build dir>/runs/<harness>/artifacts/: replay it with
# <build dir>/tests/fuzz/fuzz_<harness> FILE, and once fixed keep it in
# tests/fuzz/regressions/<harness>/ (docs/contributing.md).
#
# Usage: scripts/fuzz.sh [build dir]        (default build/fuzz)
# Environment: FUZZ_SECONDS (default 60), FUZZ_PARALLEL (default 2: the CI machine's
#   cores), FUZZ_HARNESSES (default "npy safetensors gguf hf_config cli"), CXX (default
#   clang++)
# Needs: POSENC_EXTRA_PACKAGES="clang libclang-rt-dev" scripts/install_deps.sh (libFuzzer
#   and the sanitizer runtimes are in libclang-rt-14-dev, only a Recommends of clang)
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${1:-build/fuzz}"
seconds="${FUZZ_SECONDS:-60}"
parallel="${FUZZ_PARALLEL:-2}"
read -r -a harnesses <<<"${FUZZ_HARNESSES:-npy safetensors gguf hf_config cli}"
cxx="${CXX:-clang++}"
# the largest input each fuzzer makes: room for every seed and its mutations
declare -A max_len=([npy]=4096 [safetensors]=8192 [gguf]=8192 [hf_config]=4096 [cli]=1024)
start=$SECONDS

# libFuzzer must link: say what to install rather than fail deep in the build
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
printf '%s\n' 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) {' \
  '  return 0;' '}' >"$probe/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" \
  2>"$probe/err"; then
  cat "$probe/err" >&2
  echo "fuzz.sh: $cxx cannot link -fsanitize=fuzzer: install libFuzzer" \
    "(POSENC_EXTRA_PACKAGES=\"clang libclang-rt-dev\" scripts/install_deps.sh)" >&2
  exit 1
fi

echo "== fuzz.sh: build ($cxx, libFuzzer + ASan + UBSan) in $dir"
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS_FUZZ="$flags" -DPOSENC_WARNINGS_AS_ERRORS=ON -DPOSENC_BUILD_TESTS=ON \
  -DPOSENC_BUILD_FUZZERS=ON -DPOSENC_BUILD_BENCHMARKS=OFF -DPOSENC_BUILD_EXAMPLES=OFF \
  -DPOSENC_INSTALL=OFF >/dev/null
targets=()
for h in "${harnesses[@]}"; do
  if [[ -z "${max_len[$h]:-}" ]]; then
    echo "fuzz.sh: unknown harness '$h' (${!max_len[*]})" >&2
    exit 2
  fi
  targets+=("fuzz_$h")
done
cmake --build "$dir" -j "$parallel" --target "${targets[@]}"
built=$SECONDS

asan_options="${ASAN_OPTIONS:-detect_leaks=1}"
ubsan_options="${UBSAN_OPTIONS:-print_stacktrace=1}"
# one harness: a fresh copy of its corpus, libFuzzer's log, its exit status in rc
fuzz_one() {
  local h="$1" run="$dir/runs/$1"
  rm -rf "$run"
  mkdir -p "$run/corpus" "$run/artifacts"
  cp tests/fuzz/corpus/"$h"/* "$run/corpus/"
  local rc=0 dict=()
  if [[ -f "tests/fuzz/dict/$h.dict" ]]; then dict=(-dict="tests/fuzz/dict/$h.dict"); fi
  ASAN_OPTIONS="$asan_options" UBSAN_OPTIONS="$ubsan_options" "$dir/tests/fuzz/fuzz_$h" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -max_len="${max_len[$h]}" \
    "${dict[@]}" -print_final_stats=1 -artifact_prefix="$run/artifacts/" "$run/corpus" \
    >"$run/log" 2>&1 || rc=$?
  echo "$rc" >"$run/rc"
}

echo "== fuzz.sh: ${harnesses[*]}: $seconds s each, $parallel at a time"
for h in "${harnesses[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  fuzz_one "$h" &
done
wait

echo "== fuzz.sh summary"
failed=0
for h in "${harnesses[@]}"; do
  run="$dir/runs/$h"
  rc="$(cat "$run/rc" 2>/dev/null || echo '?')"
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$run/log" | tail -1)"
  rss="$(sed -n 's/^stat::peak_rss_mb: *//p' "$run/log" | tail -1)"
  seeds=$(find "tests/fuzz/corpus/$h" -maxdepth 1 -type f | wc -l)
  grown=$(find "$run/corpus" -maxdepth 1 -type f | wc -l)
  mapfile -t found < <(find "$run/artifacts" -type f | sort)
  status=ok
  if [[ "$rc" != 0 || ${#found[@]} -gt 0 ]]; then
    status="FAILED (exit $rc)"
    failed=1
  fi
  printf '%-12s %-16s %10s executions  %5s/s  corpus %3d -> %4d  peak %s MB\n' "$h" "$status" \
    "${runs:-?}" "${rate:-?}" "$seeds" "$grown" "${rss:-?}"
  if [[ "$status" != ok ]]; then
    grep -E '^(==[0-9]+==ERROR|SUMMARY|posenc fuzz|replay|.*runtime error)|ALARM|out-of-memory' \
      "$run/log" | head -20 | sed 's/^/    /'
    for f in "${found[@]}"; do echo "    input: $f"; done
    echo "    log: $run/log"
  fi
done
echo "== fuzz.sh done in $((SECONDS - start)) s (build $((built - start)) s)"
exit "$failed"
