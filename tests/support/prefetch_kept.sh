#!/bin/sh
# Runs PROBE (a decode step, built with NDEBUG and -O2 as a release build is) and fails
# unless decode's row loops in its machine code hold prefetch instructions. GCC counts a
# prefetch as free of side effects and deleted every call to a function that only
# prefetched, so release builds decoded with none, whatever their comments said, and no
# result showed it (include/posenc/config.hpp, POSENC_PREFETCH_KEEP). The prefetches count
# in the row loops or in the row source's prefetch where a compiler keeps it out of line
# (clang with sanitizers). With FUNCTIONS (an awk regular expression on the demangled
# function names) and WHAT, the same check for another probe's kernels (RoPE's streaming
# calls: tests/encoding). A probe that exits 77 has nothing to check (skipped).
#   prefetch_kept.sh OBJDUMP PROBE [FUNCTIONS WHAT]
set -eu
"$2"
"$1" -d -C --no-show-raw-insn "$2" |
  awk -v functions="${3:-flash::(accumulate_heads|kv_row_source|prefetch_row)<}" \
      -v what="${4:-decode row loops}" '
  /^[0-9a-f]+ <.*>:$/ {
    inside = ($0 ~ functions)
  }
  inside && /[ \t](prefetch[a-z0-9]*|prfm)[ \t]/ { n++ }
  END {
    print "prefetch instructions in " what ": " n + 0
    exit n > 0 ? 0 : 1
  }'
