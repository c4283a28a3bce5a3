#!/usr/bin/env bash
# scripts/image.sh: the runtime file system of deploy/docker/Dockerfile, built
# offline from Debian packages (no registry, no container engine), with the
# programs of a build copied in.
#
#   bash scripts/image.sh [--out DIR] [--bin-dir DIR] [--tag TAG] [--print-names]
#
# --out      where to write (default build/image/)
# --bin-dir  the programs to copy (default build/bin/, built first if missing)
# --tag      image tag (default 0.2)
# --print-names  print the three image names and exit
#
# Writes into DIR:
#   rootfs/            the file system (what the test runs the programs from)
#   studio-rootfs.tar  the same as one tarball: podman import / docker import,
#                      e.g. docker import --change 'USER 10001:10001' \
#                        --change 'ENTRYPOINT ["/usr/local/bin/edge-gateway"]' \
#                        studio-rootfs.tar studio/edge-gateway:0.2
#   studio-images.tar  a `docker load` / `podman load` archive holding the three
#                      images studio/{broker-writer,edge-gateway,studioctl}:TAG,
#                      one shared layer, each with its ENTRYPOINT, USER 10001:10001
#   base.tar, base.key the Debian part, reused while its package list is unchanged
#
# The base is `mmdebstrap --variant=minbase --format=tar` of the host's own release and
# apt sources (what debian:12-slim is) plus the runtime libraries, without
# documentation, and the user studio (uid/gid 10001), as the Dockerfile's
# runtime stage. Needs root (mmdebstrap, chroot).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=$ST_ROOT/build/image
bindir=$ST_ROOT/build/bin
tag=0.2
programs=(broker-writer edge-gateway studioctl)
# Keep in step with the runtime stage of deploy/docker/Dockerfile.
runtime_pkgs=(libnng1 libpq5 libevent-2.1-7 libevent-pthreads-2.1-7 libmsgpackc2 libjwt0 libssl3 libmbedtls14 ca-certificates)
uid=10001

while [ $# -gt 0 ]; do
	case $1 in
	--out) out=$2; shift 2 ;;
	--bin-dir) bindir=$2; shift 2 ;;
	--tag) tag=$2; shift 2 ;;
	--print-names)
		for p in "${programs[@]}"; do echo "studio/$p:$tag"; done
		exit 0 ;;
	-h|--help) sed -n '2,27p' "$0"; exit 0 ;;
	*) st_die "unknown argument $1 (see --help)" ;;
	esac
done

[ "$(id -u)" -eq 0 ] || st_die "run as root (mmdebstrap and chroot need it)"
bindir_given=0
[ "$bindir" = "$ST_ROOT/build/bin" ] || bindir_given=1
if [ $bindir_given = 0 ] && [ ! -x "$bindir/edge-gateway" ]; then
	st_install "${ST_BUILD_PKGS[@]}"
	st_build "$ST_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
for p in "${programs[@]}"; do
	[ -x "$bindir/$p" ] || st_die "$bindir/$p not found: build first (cmake --build build)"
done
st_install mmdebstrap
mkdir -p "$out"
out=$(cd "$out" && pwd)

. /etc/os-release
suite=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
key="$suite ${runtime_pkgs[*]} uid=$uid v1"
if [ ! -s "$out/base.tar" ] || [ "$(cat "$out/base.key" 2>/dev/null)" != "$key" ]; then
	st_log "building the base file system ($suite, minbase + ${runtime_pkgs[*]})"
	rm -f "$out/base.tar" "$out/base.key"
	# No mirror argument: the host's apt sources are used.
	mmdebstrap --variant=minbase --format=tar --include="$(IFS=,; echo "${runtime_pkgs[*]}")" \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--customize-hook="chroot \"\$1\" groupadd --gid $uid studio" \
		--customize-hook="chroot \"\$1\" useradd --uid $uid --gid $uid --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin studio" \
		"$suite" "$out/base.tar.tmp" >"$out/mmdebstrap.log" 2>&1 ||
		{ tail -30 "$out/mmdebstrap.log" >&2; st_die "mmdebstrap failed ($out/mmdebstrap.log)"; }
	mv "$out/base.tar.tmp" "$out/base.tar"
	echo "$key" >"$out/base.key"
fi

st_log "assembling $out/rootfs"
rm -rf "$out/rootfs"
mkdir "$out/rootfs"
tar -C "$out/rootfs" --numeric-owner -xf "$out/base.tar"
for p in "${programs[@]}"; do
	install -o 0 -g 0 -m 0755 "$bindir/$p" "$out/rootfs/usr/local/bin/$p"
	strip --strip-unneeded "$out/rootfs/usr/local/bin/$p"
	# The runtime closure: every library the program needs is in the file system.
	missing=$(chroot "$out/rootfs" /usr/bin/ldd "/usr/local/bin/$p" | grep 'not found' || true)
	[ -z "$missing" ] || st_die "$p: libraries missing from the image: $missing (a sanitizer build? use a plain one)"
done

st_log "writing $out/studio-rootfs.tar and $out/studio-images.tar"
tar -C "$out/rootfs" --numeric-owner --sort=name -cf "$out/studio-rootfs.tar.tmp" .
mv "$out/studio-rootfs.tar.tmp" "$out/studio-rootfs.tar"
"$ST_PY" - "$out" "$tag" "$uid" "${programs[@]}" <<'PY'
# docker-archive (docker save) format: manifest.json, one config per image,
# the layers as tar files. All three images share the one layer.
import hashlib, io, json, os, sys, tarfile, time
out, tag, uid, programs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
layer = os.path.join(out, "studio-rootfs.tar")
h = hashlib.sha256()
with open(layer, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
diff_id = h.hexdigest()
ports = {"broker-writer": ["7450/tcp", "7451/tcp", "9450/tcp"], "edge-gateway": ["8080/tcp"]}
created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
tmp = os.path.join(out, "studio-images.tar.tmp")
with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as t:
    def add_bytes(name, data):
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode = len(data), int(time.time()), 0o644
        t.addfile(ti, io.BytesIO(data))
    t.add(layer, arcname=diff_id + "/layer.tar")
    manifest = []
    for p in programs:
        cfg = {"architecture": "amd64", "os": "linux", "created": created,
               "config": {"User": "%s:%s" % (uid, uid), "WorkingDir": "/",
                          "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                          "Entrypoint": ["/usr/local/bin/" + p],
                          "ExposedPorts": {x: {} for x in ports.get(p, [])}},
               "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff_id]},
               "history": [{"created": created, "created_by": "scripts/image.sh"}]}
        data = json.dumps(cfg, sort_keys=True).encode()
        name = hashlib.sha256(data).hexdigest() + ".json"
        add_bytes(name, data)
        manifest.append({"Config": name, "RepoTags": ["studio/%s:%s" % (p, tag)],
                         "Layers": [diff_id + "/layer.tar"]})
    add_bytes("manifest.json", json.dumps(manifest).encode())
os.rename(tmp, os.path.join(out, "studio-images.tar"))
PY
for p in "${programs[@]}"; do echo "studio/$p:$tag"; done
st_log "image file system ready: $(du -sh "$out/rootfs" | cut -f1) in $out/rootfs"
