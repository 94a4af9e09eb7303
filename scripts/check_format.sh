#!/usr/bin/env bash
# Checks that every C++ file of include/, tests/, bench/ and examples/ is formatted as
# .clang-format says (clang-format --dry-run -Werror): each difference is printed with its
# file and line, and the script fails. To fix: scripts/check_format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'include/*.hpp' 'include/*.cuh' 'tests/*.cpp' 'tests/*.hpp' \
  'tests/*.cu' 'tests/*.cuh' 'bench/*.cpp' 'bench/*.hpp' 'bench/*.cu' 'bench/*.cuh' \
  'examples/*.cpp' 'examples/*.hpp' 'examples/*.cu')
format="${CLANG_FORMAT:-clang-format}"
if [[ "${1:-}" == --fix ]]; then
  "$format" -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
if "$format" --dry-run -Werror "${files[@]}"; then
  echo "check_format: ${#files[@]} files match .clang-format ($("$format" --version))"
else
  echo "check_format: the files above differ from .clang-format; run scripts/check_format.sh --fix" >&2
  exit 1
fi
