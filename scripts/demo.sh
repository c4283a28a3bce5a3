#!/usr/bin/env bash
# scripts/demo.sh: install, build, and run the whole system on this machine.
#
# Starts a throwaway PostgreSQL 15 under build/ (unless STUDIO_PG_DSN is set),
# runs `broker-writer migrate`, one broker-writer, one edge-gateway on
# 127.0.0.1:8080 and a publisher of topic "demo" (one event a second through
# studioctl), then waits.  Ctrl-C stops everything it started.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ST_ROOT"

st_install "${ST_BUILD_PKGS[@]}"
st_build "$ST_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
BIN=$ST_ROOT/build/bin

pids=()
cleanup() {
	trap - EXIT INT TERM
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	st_pg_stop
	st_log "stopped"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${STUDIO_PG_DSN:-}" ]; then
	DSN=$STUDIO_PG_DSN
	st_log "using STUDIO_PG_DSN"
else
	st_pg_start "$ST_ROOT/build/pgdemo" demo
	DSN=$ST_PG_DSN
fi

"$BIN/broker-writer" migrate --pg-dsn "$DSN" || st_die "broker-writer migrate failed"

LOGS=$ST_ROOT/build/demo-logs
mkdir -p "$LOGS"
"$BIN/broker-writer" --pg-dsn "$DSN" --ingest tcp://127.0.0.1:7450 --publish tcp://127.0.0.1:7451 \
	--http 127.0.0.1:9450 --control tcp://127.0.0.1:7452 >"$LOGS/writer.log" 2>&1 &
pids+=($!)
"$BIN/edge-gateway" --pg-dsn "$DSN" --writers tcp://127.0.0.1:7451 --listen 127.0.0.1:8080 \
	--control tcp://127.0.0.1:7453 >"$LOGS/edge.log" 2>&1 &
pids+=($!)

wait_http() { # URL WHAT: bounded wait for a 200
	local i
	for i in $(seq 1 150); do
		curl -sf -o /dev/null "$1" && return 0
		sleep 0.2
	done
	st_log "$2 not ready after 30s; its log:"
	tail -n 40 "$LOGS/$3.log" >&2
	exit 1
}
wait_http http://127.0.0.1:9450/healthz broker-writer writer
wait_http http://127.0.0.1:8080/readyz edge-gateway edge

(
	n=0
	while true; do
		n=$((n + 1))
		"$BIN/studioctl" publish --writer tcp://127.0.0.1:7450 --topic demo \
			--data "{\"n\":$n,\"at\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}" >/dev/null ||
			echo "studioctl publish failed" >&2
		sleep 1
	done
) &
pids+=($!)

cat <<MSG

  The demo runs (logs in $LOGS). Watch the stream with:

    curl -N 'http://127.0.0.1:8080/v1/stream?topic=demo'

  Metrics: curl http://127.0.0.1:8080/metrics   Ctrl-C stops everything.
  Access control is off here (no --auth-keys): see docs/security.md to turn it on.

MSG
# Stop as soon as any part dies, so a broken demo does not look alive.
wait -n "${pids[@]}" || true
st_log "a demo process exited; stopping"
