#!/usr/bin/env python3
# ctest-labels: nosan deploy
# ctest-timeout: 400
"""The image's runtime file system (scripts/image.sh) runs the programs.

scripts/image.sh builds, offline from Debian packages, the file system of
deploy/docker/Dockerfile's runtime stage and copies this build's programs in.
No container engine can start here, so the test does what the engine would:
it runs each program from that file system with chroot, as uid/gid 10001,
on a read-only bind mount of it (readOnlyRootFilesystem), with nothing in its
environment but the STUDIO_* variables a pod spec sets (env -i): `migrate`,
a writer, an edge, studioctl publishing one event, and that event streamed
over SSE. A library missing from the image, a program needing root or a
writable root, or a flag with no variable fails here.

The base file system is cached in build/image/ (base.tar, keyed by the
package list), so only the first run downloads packages (about 75 s).
"""
import json
import os
import subprocess
import sys
import shutil
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
UID = 10001
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
PROGRAMS = ("broker-writer", "edge-gateway", "studioctl")
t = h.Tests()
state = {}


def image_dir():
    return os.path.normpath(os.path.join(h.BIN_DIR, "..", "image"))


def build_image():
    if "out" in state:
        return state["out"]
    out = image_dir()
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "image.sh"), "--out", out,
                        "--bin-dir", h.BIN_DIR], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=300)
    h.check(p.returncode == 0, "scripts/image.sh exited %d:\n%s"
            % (p.returncode, p.stdout.decode(errors="replace")[-3000:]))
    state["out"] = out
    state["names"] = [ln for ln in p.stdout.decode().splitlines() if ln.startswith("studio/")]
    return out


class ReadOnlyRoot:
    """The image's rootfs bind-mounted read-only, with /proc as a runtime gives it.

    The mount point is a directory of its own (never inside a temp dir that
    is removed recursively); /dev comes from the image (mmdebstrap's nodes)."""

    def __init__(self, rootfs):
        self.where = where = tempfile.mkdtemp(prefix="studio-image-root-")
        self.mounts = []
        self._mount(["--bind", rootfs, where])
        self._mount(["-o", "remount,bind,ro", where], record=False)
        self._mount(["-t", "proc", "proc", os.path.join(where, "proc")])

    def _mount(self, args, record=True):
        p = subprocess.run(["mount"] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        h.check(p.returncode == 0, "mount %s: %s" % (" ".join(args), p.stdout.decode()))
        if record:
            self.mounts.append(args[-1])

    def close(self):
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", m], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            os.rmdir(self.where)
        except OSError as e:
            h.log("warning: %s left in place: %s" % (self.where, e))


def in_image(root, program, env, args=()):
    """argv running program from the image as UID with exactly env."""
    return (["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin"]
            + ["%s=%s" % kv for kv in sorted(env.items())]
            + [CHROOT, "--userspec=%d:%d" % (UID, UID), root, "/usr/local/bin/" + program]
            + list(args))


def uids(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("Uid:", "Gid:")):
                yield line.split()[0], [int(x) for x in line.split()[1:]]


@t.case
def image_builds_with_its_runtime_closure():
    out = build_image()
    h.check_eq(state["names"], ["studio/%s:0.2" % p for p in PROGRAMS],
               "image names printed by scripts/image.sh")
    rootfs = os.path.join(out, "rootfs")
    for p in PROGRAMS:
        st = os.stat(os.path.join(rootfs, "usr/local/bin", p))
        h.check(st.st_mode & 0o111 and st.st_uid == 0, "%s: mode %o uid %d" % (p, st.st_mode, st.st_uid))
    with open(os.path.join(rootfs, "etc/passwd")) as f:
        users = {ln.split(":")[0]: ln.split(":")[2] for ln in f if ln.count(":") >= 6}
    h.check_eq(users.get("studio"), str(UID), "uid of user studio in the image")
    # No compiler, no -dev package: only runtime libraries.
    status = open(os.path.join(rootfs, "var/lib/dpkg/status")).read()
    installed = {b.split("\n")[0][len("Package: "):] for b in status.split("\n\n") if b.startswith("Package: ")}
    for bad in ("gcc", "cmake", "libnng-dev", "libpq-dev", "libevent-dev", "libmsgpack-dev"):
        h.check(bad not in installed, "%s is installed in the runtime image" % bad)
    for need in ("libnng1", "libpq5", "libevent-2.1-7", "libevent-pthreads-2.1-7", "ca-certificates"):
        h.check(need in installed, "%s missing from the runtime image" % need)


@t.case
def image_archive_is_loadable():
    out = build_image()
    with tarfile.open(os.path.join(out, "studio-images.tar")) as tf:
        manifest = json.load(tf.extractfile("manifest.json"))
        names = tf.getnames()
        h.check_eq(sorted(tag for m in manifest for tag in m["RepoTags"]), sorted(state["names"]),
                   "RepoTags of studio-images.tar")
        for m in manifest:
            for layer in m["Layers"]:
                h.check(layer in names, "layer %s listed but absent" % layer)
            cfg = json.load(tf.extractfile(m["Config"]))
            prog = m["RepoTags"][0].split("/")[1].split(":")[0]
            h.check_eq(cfg["config"]["Entrypoint"], ["/usr/local/bin/" + prog], "entrypoint of " + prog)
            h.check_eq(cfg["config"]["User"], "%d:%d" % (UID, UID), "user of " + prog)
            h.check_eq(len(cfg["rootfs"]["diff_ids"]), len(m["Layers"]), "diff_ids of " + prog)


@t.case
def programs_run_from_the_image_as_non_root():
    out = build_image()
    with h.Env(migrate=False) as env:
        ro = ReadOnlyRoot(os.path.join(out, "rootfs"))
        try:
            root = ro.where
            probe = subprocess.run(["chroot", "--userspec=%d:%d" % (UID, UID), root,
                                    "/usr/local/bin/studioctl", "--help"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            h.check(probe.returncode in (0, 1, 2) and b"usage" in probe.stdout.lower(),
                    "studioctl --help from the image: exit %d %r" % (probe.returncode, probe.stdout[-500:]))
            touch = subprocess.run(["chroot", "--userspec=%d:%d" % (UID, UID), root, "/bin/touch", "/x"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            h.check(touch.returncode != 0, "the root file system is writable: %r" % touch.stdout)

            m = subprocess.run(in_image(root, "broker-writer", {"STUDIO_PG_DSN": env.dsn}, ["migrate"]),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            h.check_eq(m.returncode, 0, "broker-writer migrate from the image (%s)" % m.stdout.decode()[-800:])
            h.check(h.psql_one(env.dsn, "SELECT to_regclass('broker_event') IS NOT NULL") == "t",
                    "migrate from the image created no broker_event table")

            ingest, publish = "tcp://127.0.0.1:%d" % h.free_port(), "tcp://127.0.0.1:%d" % h.free_port()
            whttp = "127.0.0.1:%d" % h.free_port()
            w = h.Proc("writer", in_image(root, "broker-writer", {
                "STUDIO_PG_DSN": env.dsn, "STUDIO_INGEST": ingest, "STUDIO_PUBLISH": publish,
                "STUDIO_HTTP": whttp, "STUDIO_FLUSH_INTERVAL_MS": "200"}), env.tmp)
            env.procs.append(w)
            w.ready_url = "http://%s/healthz" % whttp
            w.wait_ready(30)
            listen = "127.0.0.1:%d" % h.free_port()
            e = h.Proc("edge", in_image(root, "edge-gateway", {
                "STUDIO_PG_DSN": env.dsn, "STUDIO_WRITERS": publish, "STUDIO_LISTEN": listen,
                "STUDIO_FLUSH_INTERVAL_MS": "200"}), env.tmp)
            env.procs.append(e)
            e.ready_url = "http://%s/readyz" % listen
            e.wait_ready(30)
            for p in (w, e):
                for what, ids in uids(p.pid):
                    h.check_eq(set(ids), {UID}, "%s of the %s process" % (what, p.name))

            # Resumes from 0, so the event reaches it whether it is live yet or not.
            c = h.SseClient("http://%s/v1/stream?topic=img" % listen, headers={"Last-Event-ID": "0"})
            try:
                pub = subprocess.run(in_image(root, "studioctl", {}, [
                    "publish", "--writer", ingest, "--topic", "img", "--data", '{"from":"image"}']),
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
                h.check_eq(pub.returncode, 0, "studioctl publish from the image (%s)" % pub.stdout.decode()[-500:])
                c.wait_items(1, 15)
                h.check_items_match_rows(c.items(), h.db_events(env.dsn, ["img"]), "the streamed event")
            finally:
                c.close()
            h.check_eq(w.stop(30), 0, "writer exit status on SIGTERM")
            h.check_eq(e.stop(60), 0, "edge exit status on SIGTERM")
            h.log("FIGURE image: rootfs %d MiB, studio-images.tar %d MiB" % (
                int(subprocess.run(["du", "-sm", os.path.join(out, "rootfs")], stdout=subprocess.PIPE)
                    .stdout.split()[0]),
                os.path.getsize(os.path.join(out, "studio-images.tar")) >> 20))
        finally:
            ro.close()


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("test_image needs root (chroot, mount): skipped")
        sys.exit(h.SKIP)
    t.main()
