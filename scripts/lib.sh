# scripts/lib.sh: shared by scripts/bench.sh, cluster.sh, demo.sh, image.sh and
# test.sh (sourced, not run; tests/integration/test_manifests.py sources it too,
# for st_install and st_need_cmd).
#
# Provides: st_log MSG...          a timestamped line on stderr
#           st_die MSG...          st_log "error: MSG", then exit 1
#           st_install PKG...      install what dpkg-query says is missing (apt-get, as root)
#           st_need_cmd CMD PKG    st_install PKG only when CMD is not on PATH
#           st_build DIR ARGS...   cmake configure (log in DIR.configure.log) + build into DIR
#           st_pg_as CMD...        CMD as the user owning the data directory (postgres when root)
#           st_free_port           prints a free TCP port on 127.0.0.1
#           st_pg_start DIR MODE   a throwaway PostgreSQL 15 in DIR/data (in a /tmp directory
#                                  when user postgres cannot reach DIR); MODE test turns
#                                  fsync, synchronous_commit, full_page_writes off, demo not;
#                                  sets ST_PG_PORT, ST_PG_DSN (admin, user postgres, TCP),
#                                  ST_PG_DATA and ST_PG_SOCK (its Unix socket directory)
#           st_pg_stop             stops the server this shell started (idempotent; call it
#                                  from a trap); does nothing when ST_PG_DATA is empty (from
#                                  another shell: ST_PG_DATA=DIR/data st_pg_stop)
#           ST_ROOT                the checkout; ST_PY python3; ST_PGBIN PostgreSQL 15's bin/
#           ST_BUILD_PKGS          the Debian packages to build and run (every script)
#           ST_DEPLOY_PKGS         those of the deployment tests (test.sh; see below)
# PostgreSQL refuses to run as root, so as root every server command runs as
# the `postgres` system user, which owns the data directory.

ST_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ST_PY=/usr/bin/python3
ST_PGBIN=/usr/lib/postgresql/15/bin
ST_PG_DATA=
ST_PG_SOCK=
export DEBIAN_FRONTEND=noninteractive

st_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
st_die() { st_log "error: $*"; exit 1; }

st_install() {
	local missing=() p
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" -eq 0 ] || st_die "missing packages (${missing[*]}); run as root to install them"
	st_log "installing: ${missing[*]}"
	apt-get update -q || st_die "apt-get update failed"
	apt-get install -y -q --no-install-recommends "${missing[@]}" || st_die "apt-get install failed"
}

st_build() {
	local dir=$1
	shift
	st_log "building $dir ($*)"
	cmake -S "$ST_ROOT" -B "$dir" "$@" >"$dir.configure.log" 2>&1 ||
		{ cat "$dir.configure.log" >&2; st_die "cmake configure of $dir failed"; }
	cmake --build "$dir" -j"$(nproc)" || st_die "build of $dir failed"
}

# Runs a PostgreSQL server command as the user that owns the data directory.
st_pg_as() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

st_free_port() {
	"$ST_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

st_pg_start() {
	local base=$1 mode=$2
	[ -x "$ST_PGBIN/initdb" ] || st_die "$ST_PGBIN/initdb not found (package postgresql-15)"
	if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
		st_log "creating system user postgres"
		useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres || st_die "useradd postgres failed"
	fi
	mkdir -p "$base"
	# The server user must reach the data directory; a clone under /root (0700)
	# would not let it, so fall back to a private directory under /tmp.
	if [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$base"; then
		base=$(mktemp -d /tmp/studio-pg.XXXXXX)
		chmod 755 "$base"
		st_log "the build folder is not reachable by user postgres; using $base"
	fi
	ST_PG_DATA="$base/data"
	rm -rf "$ST_PG_DATA"
	mkdir -p "$ST_PG_DATA"
	# Unix sockets in a private short path (sun_path is 108 bytes).
	ST_PG_SOCK=$(mktemp -d /tmp/studio-pgsock.XXXXXX)
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$ST_PG_DATA" "$ST_PG_SOCK"
	fi
	chmod 700 "$ST_PG_DATA" "$ST_PG_SOCK"
	ST_PG_PORT=$(st_free_port)
	st_pg_as "$ST_PGBIN/initdb" -D "$ST_PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
		>"$base/initdb.log" 2>&1 || { cat "$base/initdb.log" >&2; st_die "initdb failed"; }
	{
		echo "listen_addresses = '127.0.0.1'"
		echo "port = $ST_PG_PORT"
		echo "unix_socket_directories = '$ST_PG_SOCK'"
		echo "max_connections = 200"
		echo "track_commit_timestamp = on"
		if [ "$mode" = test ]; then
			echo "fsync = off"
			echo "synchronous_commit = off"
			echo "full_page_writes = off"
		fi
	} | st_pg_as tee -a "$ST_PG_DATA/postgresql.conf" >/dev/null
	st_pg_as "$ST_PGBIN/pg_ctl" -D "$ST_PG_DATA" -l "$ST_PG_DATA/server.log" -w -t 60 start >/dev/null ||
		{ st_pg_as cat "$ST_PG_DATA/server.log" >&2; ST_PG_DATA=; st_die "PostgreSQL did not start"; }
	ST_PG_DSN="host=127.0.0.1 port=$ST_PG_PORT user=postgres dbname=postgres"
	st_log "PostgreSQL 15 on 127.0.0.1:$ST_PG_PORT (data $ST_PG_DATA)"
}

st_pg_stop() {
	if [ -n "$ST_PG_DATA" ] && [ -f "$ST_PG_DATA/postmaster.pid" ]; then
		st_pg_as "$ST_PGBIN/pg_ctl" -D "$ST_PG_DATA" -m fast -w -t 30 stop >/dev/null 2>&1 ||
			st_log "warning: pg_ctl stop failed"
		st_log "PostgreSQL stopped"
	fi
	ST_PG_DATA=
	[ -n "$ST_PG_SOCK" ] && rm -rf "$ST_PG_SOCK"
	ST_PG_SOCK=
}

ST_BUILD_PKGS=(build-essential cmake pkg-config libnng-dev libpq-dev libevent-dev libmsgpack-dev
	libjwt-dev libssl-dev libmbedtls-dev
	postgresql-15 postgresql-client-15 curl python3 procps util-linux)
# Deployment tests (test_image, test_manifests, test_cluster) and scripts/image.sh,
# scripts/cluster.sh: mmdebstrap builds the image's file system, nginx-light is
# the cluster's ingress. kubectl (kustomize) and node/npm (the schema
# validator) are installed by st_need_cmd only when the command is missing:
# a machine may carry them from elsewhere, and Debian's packages would clash.
# prometheus: promtool and the server test_observability.py runs as its own
# child on a free loopback port (a service the package's postinst may start
# on :9090 is neither used nor in the way).
ST_DEPLOY_PKGS=(mmdebstrap nginx-light python3-yaml prometheus)

# st_need_cmd CMD PKG: installs PKG when CMD is not on PATH.
st_need_cmd() {
	command -v "$1" >/dev/null 2>&1 && return 0
	st_install "$2"
}
