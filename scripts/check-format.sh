#!/usr/bin/env bash
# scripts/check-format.sh: every C file of the tree is as .clang-format says
# (clang-format 14, Debian 12's).  Run by ctest (test `clang_format`); to fix:
#   git ls-files '*.c' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v clang-format >/dev/null || { echo "clang-format is not installed (apt-get install clang-format)"; exit 1; }
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -path ./build\* -prune -o \( -name '*.c' -o -name '*.h' \) -print)
# --dry-run -Werror: one line per place that differs, and a non-zero exit
if ! out=$(echo "$files" | xargs clang-format --dry-run -Werror 2>&1); then
	echo "$out" | grep -E "^[^ ].*: (error|warning):" | head -40
	n=$(echo "$out" | grep -cE "^[^ ].*: (error|warning):" || true)
	echo "FAIL: $n places differ from .clang-format (first 40 above); run: git ls-files '*.c' '*.h' | xargs clang-format -i"
	exit 1
fi
echo "ok: $(echo "$files" | wc -l) files as .clang-format says"
