#!/bin/sh
# run.sh TARGET SECONDS: builds (if needed) and runs one libFuzzer target for
# SECONDS; exits non-zero on a finding (crash, broken check, leak, timeout,
# out of memory) and names the reproducer.  For CI: one line per target,
#   fuzz/run.sh json_compact 30
# run.sh --list: the targets (defined in fuzz/CMakeLists.txt), one a line.
# Environment: FUZZ_BUILD_DIR (default <repo>/build-fuzz), FUZZ_CC (default
# clang-14, else clang), FUZZ_JOBS (build parallelism, default 2), FUZZ_WERROR
# (ON: warnings are errors, as scripts/test.sh runs it; default OFF).
# New corpus entries go to $FUZZ_BUILD_DIR/fuzz-work/TARGET/corpus (the
# checked-in seeds under fuzz/corpus/TARGET are only read), reproducers to
# $FUZZ_BUILD_DIR/fuzz-work/TARGET/artifacts/.
set -eu

usage() {
	echo "usage: $0 TARGET SECONDS | $0 --list" >&2
	[ -f "$build/fuzz/targets.txt" ] && echo "targets: $(cat "$build/fuzz/targets.txt" | tr '\n' ' ')" >&2
	exit 2
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
cc=${FUZZ_CC:-}
if [ -z "$cc" ]; then
	if command -v clang-14 >/dev/null 2>&1; then cc=clang-14; else cc=clang; fi
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
	cmake -S "$here" -B "$build" -DCMAKE_C_COMPILER="$cc" -DSTUDIO_FUZZ=ON \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTUDIO_WERROR="${FUZZ_WERROR:-OFF}" >/dev/null
else
	# an existing build dir keeps its compiler; the warning policy follows this run
	cmake -S "$here" -B "$build" -DSTUDIO_WERROR="${FUZZ_WERROR:-OFF}" >/dev/null
fi
# The target list is fuzz/CMakeLists.txt's, written at configure time.
TARGETS=$(cat "$build/fuzz/targets.txt")

if [ $# -eq 1 ] && [ "$1" = --list ]; then
	echo "$TARGETS"
	exit 0
fi
[ $# -eq 2 ] || usage
target=$1
secs=$2
case " $(echo $TARGETS) " in *" $target "*) ;; *) usage ;; esac
case "$secs" in '' | *[!0-9]*) usage ;; esac

# FUZZ_NO_BUILD=1: the caller built every target already (scripts/test.sh runs two at once)
[ "${FUZZ_NO_BUILD:-0}" = 1 ] || cmake --build "$build" --target "fuzz_$target" -j"${FUZZ_JOBS:-2}" >/dev/null

work=$build/fuzz-work/$target
mkdir -p "$work/corpus" "$work/artifacts"
extra=""
case "$target" in
http_head) extra="-max_len=12288 -len_control=0" ;; # past the 8 KiB head limit (431)
esac

rc=0
# shellcheck disable=SC2086
"$build/fuzz/fuzz_$target" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=25 \
	-print_final_stats=1 -artifact_prefix="$work/artifacts/" $extra \
	"$work/corpus" "$here/corpus/$target" || rc=$?
if [ "$rc" -ne 0 ]; then
	echo "run.sh: $target FOUND A PROBLEM (exit $rc); reproducer(s):" >&2
	ls -1 "$work/artifacts/" >&2 || true
	echo "replay one with: $build/fuzz/fuzz_$target FILE" >&2
	exit 1
fi
echo "run.sh: $target: no finding in ${secs}s"
