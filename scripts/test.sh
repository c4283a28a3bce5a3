#!/usr/bin/env bash
# scripts/test.sh: the whole test run on a fresh Debian 12 machine (as root).
#
# Installs what is missing, builds four times, each with warnings as errors
# (-DSTUDIO_WERROR=ON; a user's build leaves them warnings): build/ plain,
# build-release/ (Release, only built: a user's release build must compile),
# build-asan/ with ASan+UBSan and build-tsan/ with TSan; starts a throwaway
# PostgreSQL 15 of its own under build/ (127.0.0.1, a free port, fsync off),
# exports STUDIO_TEST_PG_DSN and runs ctest: everything on build/, everything
# but the memory/throughput measurements (label measure) and the valgrind run
# (label nosan) on build-asan/, the multi-threaded tests on build-tsan/; then
# fuzzes every parser briefly.  The server is stopped at the end, also on
# failure or Ctrl-C.  Exit status: 0 only when every step passed.
#
# Environment: STUDIO_TEST_ONLY_PLAIN=1 skips the sanitizer builds (local use);
# CTEST_ARGS adds arguments to the three ctest runs (e.g. CTEST_ARGS="-R it_e2e").
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ST_ROOT"

t0=$(date +%s)
st_install "${ST_BUILD_PKGS[@]}" "${ST_DEPLOY_PKGS[@]}" chromium clang clang-format libclang-rt-14-dev valgrind
st_need_cmd kubectl kubernetes-client
st_need_cmd npm npm
# TypeScript (clients/js devDependency, pinned by its package-lock.json) for
# js_client_unit's tsc --noEmit --strict over the client's README examples.
st_log "npm ci in clients/js"
(cd "$ST_ROOT/clients/js" && npm ci --no-audit --no-fund)
st_build "$ST_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTUDIO_WERROR=ON
# -O2 without -g finds warnings (format-truncation, maybe-uninitialized) that
# the other builds do not; nothing runs from it.
st_build "$ST_ROOT/build-release" -DCMAKE_BUILD_TYPE=Release -DSTUDIO_WERROR=ON
if [ "${STUDIO_TEST_ONLY_PLAIN:-0}" != 1 ]; then
	st_build "$ST_ROOT/build-asan" -DCMAKE_BUILD_TYPE=Debug -DSTUDIO_SANITIZER=address -DSTUDIO_WERROR=ON
	st_build "$ST_ROOT/build-tsan" -DCMAKE_BUILD_TYPE=Debug -DSTUDIO_SANITIZER=thread -DSTUDIO_WERROR=ON
fi

trap 'st_pg_stop' EXIT
trap 'exit 130' INT TERM
st_pg_start "$ST_ROOT/build/pgtest" test
export STUDIO_TEST_PG_DSN="$ST_PG_DSN"
# The integration tests must not pick up a developer's own settings.
unset STUDIO_PG_DSN || true
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
read -r -a extra <<<"${CTEST_ARGS:-}"
st_log "ctest on build/ (all tests)"
(cd build && ctest --output-on-failure -j2 "${extra[@]}") || status=1
if [ "${STUDIO_TEST_ONLY_PLAIN:-0}" != 1 ]; then
	st_log "ctest on build-asan/ (all but labels measure, nosan, onethread and browser)"
	(cd build-asan && ctest --output-on-failure -j2 -LE "measure|nosan|onethread|browser" "${extra[@]}") || status=1
	# ThreadSanitizer on what shares data between threads: the edge with
	# --threads 2 (label threads: frames shared by reference, atomics,
	# mailboxes, the shared key set and per-address table), the mailbox, the
	# resolver and the database connection that resolves through it
	# (st_pgconn_test), the per-address table's own test, the writer's ingest
	# and the edge's sub against real nng peers, and libstudio-producer (its
	# requests run on nng's threads beside the caller's).  A race aborts the program,
	# which fails its test; tests/tsan.supp says what is suppressed and why.
	st_log "ctest on build-tsan/ (label threads, st_mailbox_test, st_resolve_test, st_pgconn_test, iplimit_test, fanout_test, ingest_test, sub_test, the producer library)"
	(cd build-tsan && TSAN_OPTIONS="suppressions=$ST_ROOT/tests/tsan.supp halt_on_error=1 abort_on_error=1" \
		ctest --output-on-failure -j2 -R "^(it_threads_.*|st_mailbox_test|st_resolve_test|st_pgconn_test|iplimit_test|fanout_test|ingest_test|sub_test|producer_test|it_producer_lib)$" "${extra[@]}") ||
		status=1
fi
# Coverage-guided fuzzing of every parser that takes outside input (fuzz/,
# clang + libFuzzer): a short run per target; a finding fails the run.
if [ "${STUDIO_TEST_FUZZ_S:-4}" != 0 ]; then
	st_log "fuzzing each parser for ${STUDIO_TEST_FUZZ_S:-4}s"
	fuzz_targets=$(FUZZ_WERROR=ON bash fuzz/run.sh --list) || { status=1; fuzz_targets=; st_log "fuzz: configure FAILED"; }
	if [ -n "$fuzz_targets" ] && ! cmake --build build-fuzz -j2 >build/fuzz-build.log 2>&1; then
		status=1
		fuzz_targets=
		st_log "fuzz: build FAILED (build/fuzz-build.log)"
		tail -20 build/fuzz-build.log
	fi
	# Two at a time (one per core; each libFuzzer run is one process): every
	# target still gets its own seconds, log and verdict.
	read -r -a fuzz_list <<<"$(echo $fuzz_targets)"
	for ((i = 0; i < ${#fuzz_list[@]}; i += 2)); do
		pair=("${fuzz_list[@]:i:2}")
		pids=()
		for t in "${pair[@]}"; do
			FUZZ_NO_BUILD=1 FUZZ_WERROR=ON bash fuzz/run.sh "$t" "${STUDIO_TEST_FUZZ_S:-4}" >"build/fuzz-$t.log" 2>&1 &
			pids+=($!)
		done
		for k in "${!pair[@]}"; do
			wait "${pids[$k]}" ||
				{ status=1; st_log "fuzz ${pair[$k]} FAILED (build/fuzz-${pair[$k]}.log)"; tail -20 "build/fuzz-${pair[$k]}.log"; }
		done
	done
	# Read by CI as the closing count of this step.
	st_log "fuzz: done"
fi
st_log "tests $([ $status -eq 0 ] && echo passed || echo FAILED) in $(($(date +%s) - t0))s"
exit $status
