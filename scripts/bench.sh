#!/usr/bin/env bash
# scripts/bench.sh: the benchmark suite, one command (as root, Debian 12).
#
# Installs what is missing (the build dependencies, nginx-light and
# libnginx-mod-nchan), builds the programs (RelWithDebInfo, never with
# sanitizers) and the bench tools (bench/, a CMake project of its own),
# starts a throwaway PostgreSQL 15 (durable settings: fsync on) unless
# STUDIO_PG_DSN names one, raises RLIMIT_NOFILE as far as the hard limit
# allows, then runs bench/run.py: every scenario against this system and
# against nchan (a private nginx: 127.0.0.1 only, worker_processes 1, its own
# prefix, pid and error log under a temp dir), with the same load client.
# Prints the table; a run of the default set also rewrites the results section
# of docs/performance.md (with --only, only when --out PATH asks for it).
#
# Usage: bash scripts/bench.sh [--quick] [--only idle,fanout,ingest,replay,fifty] [--out PATH] [--json PATH]
#        (also, not in the default set: scale_fanout, scale_writers, scale_copy:
#        docs/performance.md "How it scales", three runs each, median and range)
# Environment: STUDIO_PG_DSN (an admin DSN: each scenario creates and drops
# its own database), BENCH_BUILD_DIR (default build/), BENCH_NO_NCHAN=1,
# BENCH_KEEP=1 (keep the temp dir with every tool's output).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ST_ROOT"

build=${BENCH_BUILD_DIR:-$ST_ROOT/build}
pkgs=("${ST_BUILD_PKGS[@]}")
[ "${BENCH_NO_NCHAN:-0}" = 1 ] || pkgs+=(nginx-light libnginx-mod-nchan)
st_install "${pkgs[@]}"
# Only the three programs and nngreq (the replay scenarios publish large
# events with it): a test target of the tree failing to build must
# not stop a benchmark of the programs.
st_log "building $build (RelWithDebInfo: broker-writer edge-gateway studioctl, and nngreq for the replay scenarios)"
mkdir -p "$build"
cmake -S "$ST_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.configure.log" 2>&1 ||
	{ cat "$build.configure.log" >&2; st_die "cmake configure of $build failed"; }
cmake --build "$build" -j"$(nproc)" --target broker-writer edge-gateway studioctl nngreq || st_die "build of $build failed"
st_log "building the bench tools in $build/bench"
cmake -S "$ST_ROOT/bench" -B "$build/bench" -DCMAKE_BUILD_TYPE=Release >"$build/bench.configure.log" 2>&1 ||
	{ cat "$build/bench.configure.log" >&2; st_die "cmake configure of bench/ failed"; }
cmake --build "$build/bench" -j"$(nproc)" || st_die "build of bench/ failed"

trap 'st_pg_stop' EXIT
trap 'exit 130' INT TERM
if [ -n "${STUDIO_PG_DSN:-}" ]; then
	export STUDIO_TEST_PG_DSN="$STUDIO_PG_DSN"
else
	st_pg_start "$build/pgbench" demo
	export STUDIO_TEST_PG_DSN="$ST_PG_DSN"
fi
unset STUDIO_PG_DSN || true

# The server and the client each hold one descriptor per stream.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -n 200000 2>/dev/null || true
st_log "RLIMIT_NOFILE $(ulimit -n) (hard $(ulimit -Hn))"

export STUDIO_BIN_DIR="$build/bin" BENCH_TOOLS="$build/bench"
if [ "${BENCH_NO_NCHAN:-0}" = 1 ]; then
	export BENCH_NGINX=
else
	export BENCH_NGINX=/usr/sbin/nginx BENCH_NCHAN_MODULE=/usr/lib/nginx/modules/ngx_nchan_module.so
fi
"$ST_PY" "$ST_ROOT/bench/run.py" "$@"
