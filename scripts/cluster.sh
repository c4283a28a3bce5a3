#!/usr/bin/env bash
# scripts/cluster.sh: the Kubernetes topology of deploy/k8s on loopback.
#
#   bash scripts/cluster.sh [--dir DIR] [--net A.B.C] [--writers N] [--edges N]
#                           [--drain-grace-s S] [--port P] [--no-build]
#   bash scripts/cluster.sh restart NAME... [--new-address] [--dir DIR]   (NAME: writer1.., edge1..)
#   bash scripts/cluster.sh hosts [--dir DIR] NAME...     (the writers the name resolves to)
#
# Starts (as root; installs what is missing, builds build/ unless --no-build):
# one PostgreSQL (unless STUDIO_PG_DSN is set; migrated once, as the Job
# does), N writers (default 2, same database and lock key) on A.B.C.11, .12,
# ... (default net 127.0.74), M edges (default 3) on A.B.C.21, .22, ..., and
# nginx-light on A.B.C.1:P (default 8080) in front of the edges as the Ingress
# would be: least_conn, HTTP/1.1 to the upstream, proxy_buffering off,
# proxy_read_timeout above the heartbeat.
#
# Every edge dials tcp://studio-writer-publish:7451, the headless Service's
# name: each edge runs in a mount namespace of its own where DIR/hosts is
# bind-mounted over /etc/hosts, and that file lists the writers the name
# resolves to (`hosts` rewrites it in place). The edges resolve it again every
# 10 s, and from 250 ms on (doubling) after they lost a writer's connection,
# so a writer added there is dialed and one removed is dropped.
#
# DIR (default build/cluster) holds NAME.cmd (with @ADDR@ for the member's
# address), NAME.addr, NAME.pid, NAME.log, nginx.conf, hosts, hosts.members;
# `restart` uses them, for all the NAMEs at once (as a Deployment with
# maxSurge/maxUnavailable above 1 replaces several pods together): take the
# edges out of nginx's upstreams and the writers out of the name (what the
# endpoint controller does when a pod terminates), SIGTERM them all, wait
# for every exit, start them again (with --new-address each on a fresh
# address A.B.C.100, .101, ..., as a new pod gets a new IP), wait for every
# /readyz, put them back (a rolling restart is one restart per member).
# Ctrl-C (or SIGTERM) stops everything this script started.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dir=$ST_ROOT/build/cluster
net=127.0.74
nwriters=2
nedges=3
grace=25
port=8080
build=1
newaddr=0
cmd=up
case ${1:-} in
restart|hosts) cmd=$1; shift ;;
esac
args=()
while [ $# -gt 0 ]; do
	case $1 in
	--dir) dir=$2; shift 2 ;;
	--net) net=$2; shift 2 ;;
	--writers) nwriters=$2; shift 2 ;;
	--edges) nedges=$2; shift 2 ;;
	--drain-grace-s) grace=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	--no-build) build=0; shift ;;
	--new-address) newaddr=1; shift ;;
	-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
	-*) st_die "unknown option $1 (see --help)" ;;
	*) args+=("$1"); shift ;;
	esac
done

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

# Starts member NAME from DIR/NAME.cmd (one argument a line, @ADDR@ standing
# for DIR/NAME.addr), detached.
start_member() {
	local name=$1 argv=() addr=
	[ -f "$dir/$name.addr" ] && addr=$(cat "$dir/$name.addr")
	mapfile -t argv <"$dir/$name.cmd"
	argv=("${argv[@]//@ADDR@/$addr}")
	setsid "${argv[@]}" >>"$dir/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/$name.pid"
}

wait_ready() {
	local name=$1 url t0
	url=$(cat "$dir/$name.ready")
	url=${url//@ADDR@/$(cat "$dir/$name.addr")}
	t0=$(date +%s)
	until curl -sf -o /dev/null --max-time 1 "$url"; do
		alive "$name" || { tail -20 "$dir/$name.log" >&2; st_die "$name exited before it was ready"; }
		[ $(($(date +%s) - t0)) -lt 60 ] || st_die "$name not ready within 60 s ($url)"
		sleep 0.2
	done
}

stop_member() {
	local name=$1 p t0
	p=$(pid_of "$name")
	[ -n "$p" ] || return 0
	kill -TERM "$p" 2>/dev/null || return 0
	t0=$(date +%s)
	while kill -0 "$p" 2>/dev/null; do
		if [ $(($(date +%s) - t0)) -ge 60 ]; then kill -KILL "$p" 2>/dev/null || true; fi
		sleep 0.1
	done
}

# The writers the headless name resolves to (kept in hosts.members).
write_hosts() {
	local tmp=$dir/hosts.new w
	echo "$*" >"$dir/hosts.members"
	{
		echo "127.0.0.1 localhost"
		for w in "$@"; do echo "$(cat "$dir/$w.addr") studio-writer-publish"; done
	} >"$tmp"
	# In place: the edges see this inode through their bind mount.
	cat "$tmp" >"$dir/hosts"
	rm -f "$tmp"
}

# nginx.conf with the edges in rotation (as an Ingress controller's
# upstreams follow the ready endpoints).
write_nginx_conf() {
	local net port all n
	read -r net port all <"$dir/nginx.members"
{
	echo "worker_processes 1;"
	echo "pid $dir/nginx.pid;"
	echo "error_log $dir/nginx.error.log warn;"
	echo "worker_rlimit_nofile 65536;"
	echo "events { worker_connections 20000; }"
	echo "http {"
	echo "  access_log off;"
	echo "  upstream studio_edge {"
	echo "    least_conn;"
	for n in "$@"; do echo "    server $(cat "$dir/$n.addr"):8080 max_fails=0;"; done
	echo "    keepalive 64;"
	echo "  }"
	echo "  server {"
	echo "    listen $net.1:$port;"
	echo "    location / {"
	echo "      proxy_pass http://studio_edge;"
	echo "      proxy_http_version 1.1;"
	echo "      proxy_set_header Connection \"\";"
	echo "      proxy_buffering off;"
	echo "      proxy_cache off;"
	echo "      proxy_read_timeout 60s;"     # above --heartbeat-s 15
	echo "      proxy_next_upstream error timeout http_503;"
	echo "    }"
	echo "  }"
	echo "}"
} >"$dir/nginx.conf.new"
	mv "$dir/nginx.conf.new" "$dir/nginx.conf"
}

# Takes the edges NAME... out of nginx's rotation (or, with none, puts every
# edge back); the old nginx workers keep their open streams until those end.
rotate() {
	local net port all rest=() n
	read -r net port all <"$dir/nginx.members"
	for n in $all; do among "$n" "$@" || rest+=("$n"); done
	write_nginx_conf "${rest[@]}"
	nginx -c "$dir/nginx.conf" -s reload
}

# Whether word $1 is among the rest.
among() { local w=$1 x; shift; for x in "$@"; do [ "$x" = "$w" ] && return 0; done; return 1; }

# A loopback address no member has had: A.B.C.100, .101, ... (a new pod IP).
fresh_addr() {
	local net port all k
	read -r net port all <"$dir/nginx.members"
	k=$(cat "$dir/next_host" 2>/dev/null || echo 100)
	[ "$k" -le 254 ] || st_die "no fresh address left in $net.0/24"
	echo $((k + 1)) >"$dir/next_host"
	echo "$net.$k"
}

if [ "$cmd" = restart ]; then
	[ ${#args[@]} -ge 1 ] || st_die "usage: cluster.sh restart NAME... [--new-address] [--dir DIR]"
	for name in "${args[@]}"; do
		[ -f "$dir/$name.cmd" ] || st_die "no member $name in $dir"
		case $name in edge*|writer*) ;; *) st_die "restart: $name is neither an edge nor a writer" ;; esac
	done
	edges_out=() writers_out=() keep=()
	for name in "${args[@]}"; do case $name in edge*) edges_out+=("$name") ;; *) writers_out+=("$name") ;; esac; done
	read -r -a cur <"$dir/hosts.members"
	for w in "${cur[@]}"; do among "$w" "${writers_out[@]}" || keep+=("$w"); done
	[ ${#edges_out[@]} -gt 0 ] && rotate "${edges_out[@]}"
	[ ${#writers_out[@]} -gt 0 ] && write_hosts "${keep[@]}"
	t0=$(date +%s%N)
	for name in "${args[@]}"; do p=$(pid_of "$name"); [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
	for name in "${args[@]}"; do stop_member "$name"; done
	t1=$(date +%s%N)
	for name in "${args[@]}"; do
		if [ "$newaddr" = 1 ]; then
			a=$(fresh_addr)
			st_log "$name: new address $a (was $(cat "$dir/$name.addr"))"
			echo "$a" >"$dir/$name.addr"
		fi
		start_member "$name"
	done
	for name in "${args[@]}"; do wait_ready "$name"; done
	[ ${#writers_out[@]} -gt 0 ] && write_hosts "${keep[@]}" "${writers_out[@]}"
	[ ${#edges_out[@]} -gt 0 ] && rotate
	st_log "restarted ${args[*]}: drained and exited in $(((t1 - t0) / 1000000)) ms, ready again after $((($(date +%s%N) - t1) / 1000000)) ms"
	exit 0
fi
if [ "$cmd" = hosts ]; then
	write_hosts "${args[@]}"
	exit 0
fi

[ "$(id -u)" -eq 0 ] || st_die "run as root (mount namespaces for the edges' /etc/hosts, nginx)"
st_install "${ST_BUILD_PKGS[@]}" nginx-light
[ "$build" = 1 ] && st_build "$ST_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
bin=${STUDIO_BIN_DIR:-$ST_ROOT/build/bin}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -f "$dir"/*.pid "$dir"/*.cmd "$dir"/*.ready "$dir"/*.addr "$dir/ready" "$dir/next_host" "$dir/hosts.members"

members=()
cleanup() {
	trap - EXIT INT TERM
	st_log "stopping the cluster"
	local m
	for m in "${members[@]}"; do
		p=$(pid_of "$m"); [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true
	done
	for m in "${members[@]}"; do stop_member "$m"; done
	st_pg_stop
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${STUDIO_PG_DSN:-}" ]; then
	dsn=$STUDIO_PG_DSN
else
	st_pg_start "$dir/pg" demo
	dsn=$ST_PG_DSN
fi
"$bin/broker-writer" migrate --pg-dsn "$dsn" >"$dir/migrate.log" 2>&1 ||
	{ cat "$dir/migrate.log" >&2; st_die "migrate failed"; }

writers=()
for i in $(seq 1 "$nwriters"); do
	n=writer$i a=$net.$((10 + i))
	echo "$a" >"$dir/$n.addr"
	printf '%s\n' "$bin/broker-writer" --pg-dsn "$dsn" --ingest "tcp://@ADDR@:7450" --publish "tcp://@ADDR@:7451" \
		--http "@ADDR@:9450" --control "tcp://@ADDR@:7452" >"$dir/$n.cmd"
	echo "http://@ADDR@:9450/readyz" >"$dir/$n.ready"
	members+=("$n"); writers+=("$n")
	start_member "$n"
done
for n in "${writers[@]}"; do wait_ready "$n"; done
: >"$dir/hosts"
write_hosts "${writers[@]}"

edges=()
for i in $(seq 1 "$nedges"); do
	n=edge$i a=$net.$((20 + i))
	echo "$a" >"$dir/$n.addr"
	# A private mount namespace whose /etc/hosts is DIR/hosts.
	printf '%s\n' unshare --mount -- bash -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$dir/hosts" \
		"$bin/edge-gateway" --pg-dsn "$dsn" --writers tcp://studio-writer-publish:7451 \
		--listen "@ADDR@:8080" --control "tcp://@ADDR@:7453" --drain-grace-s "$grace" --heartbeat-s 15 \
		>"$dir/$n.cmd"
	echo "http://@ADDR@:8080/readyz" >"$dir/$n.ready"
	members+=("$n"); edges+=("$n")
	start_member "$n"
done
for n in "${edges[@]}"; do wait_ready "$n"; done

echo "$net $port ${edges[*]}" >"$dir/nginx.members"
write_nginx_conf "${edges[@]}"
printf '%s\n' nginx -c "$dir/nginx.conf" -g "daemon off;" >"$dir/nginx.cmd"
echo "http://$net.1:$port/" >"$dir/nginx.ready"
members+=(nginx)
start_member nginx
t0=$(date +%s)
until curl -s -o /dev/null --max-time 1 "http://$net.1:$port/"; do
	alive nginx || { cat "$dir/nginx.log" "$dir/nginx.error.log" >&2 2>/dev/null; st_die "nginx exited"; }
	[ $(($(date +%s) - t0)) -lt 30 ] || st_die "nginx not answering"
	sleep 0.2
done

echo "$dsn" >"$dir/dsn"
: >"$dir/ready"
st_log "cluster up: curl -N 'http://$net.1:$port/v1/stream?topic=demo'"
st_log "  producers: ${writers[*]/#/} at tcp://$net.11..$((10 + nwriters)):7450; edges $net.21..$((20 + nedges)):8080; files in $dir"
st_log "  rolling restart: for m in ${edges[*]} ${writers[*]}; do bash scripts/cluster.sh restart \$m --dir $dir; done"
st_log "  as a Deployment with new pod IPs: bash scripts/cluster.sh restart edge1 edge2 --new-address --dir $dir"
st_log "  publish: $bin/studioctl publish --writer tcp://$net.11:7450 --topic demo --data '{\"hello\":1}'"
st_log "Ctrl-C stops everything"
while :; do sleep 1; done
