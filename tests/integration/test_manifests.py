#!/usr/bin/env python3
# ctest-labels: nosan deploy
# ctest-timeout: 300
"""The kustomize manifests (deploy/k8s), rendered and validated offline.

Every overlay is rendered with `kubectl kustomize` and every object is
validated against the Kubernetes API schema by the npm package
kubernetes-models (tests/integration/k8s_validate.js; installed into
build/k8s-validate/ on first use). Then the project's own rules over the
rendered objects (docs/deploy.md "What the tests check"): ports, probe paths
(asked of the real programs), grace periods, flags set by environment that
`--help` lists, image names that scripts/image.sh and the Dockerfile make,
security contexts, resources from the memory arithmetic, the headless
Service the edges dial, budgets and the autoscaler per overlay.
"""
import base64
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
K8S = os.path.join(ROOT, "deploy", "k8s")
OVERLAYS = ("dev", "prod")
UID = 10001
MODELS = "kubernetes-models@4.5.1"   # CommonJS, node >= 14 (Debian 12 has 18)
# prometheus-operator's CRDs (the prod overlay's PrometheusRule and
# PodMonitor), the same project's models on the same base version.
CRD_MODELS = "@kubernetes-models/prometheus-operator@4.4.4"
# docs/writer.md "Memory bound" total, docs/edge.md "Memory bound" terms,
# docs/deploy.md "Resources": per stream 4 MiB of queues + a stalled
# socket's send buffer (tcp_wmem max, 4 MiB by default); with N > 1 threads
# 128 MiB of mailboxes and 1.3 MiB per database connection past 4 (P = 2 + 2N).
WRITER_BOUND_MIB = 6654
EDGE_BASE_MIB, EDGE_STREAM_MIB, EDGE_SOCKBUF_MIB = 300, 4, 4
EDGE_MAILBOX_MIB, EDGE_CONN_MIB = 128, 1.3
PG_CA_SECRET, PG_CA_ENV = "studio-pg-ca", "PGSSLROOTCERT"
INGRESS_EXAMPLE = os.path.join(K8S, "examples", "ingress-nginx.yaml")
PG_PORT = 5432
# Database connections per pod (docs/deploy.md "PostgreSQL connections"):
# the writer's flush and retention; the edge's pools (edge-gateway/fanout.h,
# whose definitions are checked below so that a change there fails here).
WRITER_PG_CONNS, MIGRATE_PG_CONNS = 2, 1
FANOUT_DEFS = ("#define FANOUT_POOL_CONNS(n) ((n) == 1 ? 3u : 2u)",
               "#define FANOUT_MAIN_POOL_CONNS(n) ((n) == 1 ? 1u : 2u)")


def edge_pg_conns(threads):
    return 4 if threads == 1 else 2 + 2 * threads
t = h.Tests(needs_pg=False)
cache = {}


def sh(args, timeout=120, **kw):
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, **kw)


def install():
    p = sh(["bash", "-c", '. "%s/scripts/lib.sh"; st_install python3-yaml; st_need_cmd kubectl kubernetes-client;'
            ' st_need_cmd npm npm' % ROOT], timeout=600)
    h.check(p.returncode == 0, "installing python3-yaml, kubectl, npm failed: %s" % p.stderr.decode()[-1500:])


def render(overlay):
    if overlay not in cache:
        import yaml
        p = sh(["kubectl", "kustomize", os.path.join(K8S, "overlays", overlay)])
        h.check(p.returncode == 0, "kubectl kustomize overlays/%s: %s" % (overlay, p.stderr.decode()[-2000:]))
        docs = [d for d in yaml.safe_load_all(p.stdout) if d]
        # kustomize 5 wraps a generated Secret's base64 at 70 columns; the
        # API server's decoder ignores the line breaks, the schema's "byte"
        # format does not.
        for d in docs:
            if d["kind"] == "Secret":
                d["data"] = {k: "".join(v.split()) for k, v in d.get("data", {}).items()}
        cache[overlay] = docs
    return cache[overlay]


def objs(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    h.check_eq(len(found), 1, "objects %s/%s" % (kind, name))
    return found[0]


def pod_specs(docs):
    """(owner, pod spec) of every Deployment and Job."""
    for d in docs:
        if d["kind"] in ("Deployment", "Job"):
            yield "%s/%s" % (d["kind"], d["metadata"]["name"]), d["spec"]["template"]


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def program_of(image):
    return image.split("/")[-1].split(":")[0]


def image_names():
    if "names" not in cache:
        p = sh(["bash", os.path.join(ROOT, "scripts", "image.sh"), "--print-names"])
        h.check(p.returncode == 0, "image.sh --print-names: %s" % p.stderr.decode())
        cache["names"] = p.stdout.decode().split()
    return cache["names"]


def mib(q):
    m = re.fullmatch(r"(\d+)(Mi|Gi)", q)
    h.check(m, "memory quantity %r is not NMi or NGi" % q)
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


@t.case
def overlays_render_and_validate_against_the_api_schema():
    install()
    moddir = os.path.normpath(os.path.join(h.BIN_DIR, "..", "k8s-validate"))
    if not all(os.path.isdir(os.path.join(moddir, "node_modules", m.rsplit("@", 1)[0])) for m in (MODELS, CRD_MODELS)):
        os.makedirs(moddir, exist_ok=True)
        p = sh(["npm", "install", "--no-audit", "--no-fund", "--prefix", moddir, MODELS, CRD_MODELS], timeout=300)
        h.check(p.returncode == 0, "npm install %s %s: %s" % (MODELS, CRD_MODELS, p.stderr.decode()[-1500:]))
    env = dict(os.environ, NODE_PATH=os.path.join(moddir, "node_modules"))
    validator = os.path.join(HERE, "k8s_validate.js")

    def validate(docs):
        return sh(["node", validator], input=json.dumps(docs).encode(), env=env)
    # The validator can fail: a port given as text is refused.
    broken = json.loads(json.dumps(one(render("prod"), "Deployment", "studio-edge")))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8080"
    p = validate([broken])
    h.check(p.returncode == 1 and b"containerPort" in p.stdout,
            "the validator accepted a string containerPort: exit %d %s" % (p.returncode, p.stdout.decode()))
    import yaml
    with open(INGRESS_EXAMPLE) as f:
        ingress = [d for d in yaml.safe_load_all(f) if d]
    p = validate(ingress)
    h.check(p.returncode == 0, "examples/ingress-nginx.yaml: schema errors:\n%s%s" % (p.stdout.decode(), p.stderr.decode()))
    for o in OVERLAYS:
        docs = render(o)
        p = validate(docs)
        h.check(p.returncode == 0, "overlays/%s: schema errors:\n%s%s" % (o, p.stdout.decode(), p.stderr.decode()))
        h.log("overlays/%s: %d objects valid: %s" % (o, len(docs), ", ".join(
            sorted("%s/%s" % (d["kind"], d["metadata"]["name"]) for d in docs))))


@t.case
def images_match_image_sh_and_the_dockerfile():
    names = image_names()
    dockerfile = open(os.path.join(ROOT, "deploy", "docker", "Dockerfile")).read()
    image_sh = open(os.path.join(ROOT, "scripts", "image.sh")).read()
    for n in names:
        prog = program_of(n)
        h.check(re.search(r"^FROM runtime AS %s$" % re.escape(prog), dockerfile, re.M),
                "the Dockerfile has no target %s for image %s" % (prog, n))
        h.check('ENTRYPOINT ["/usr/local/bin/%s"]' % prog in dockerfile, "no ENTRYPOINT for %s" % prog)
    pkgs_sh = re.search(r"^runtime_pkgs=\((.*)\)$", image_sh, re.M).group(1).split()
    runtime = dockerfile[dockerfile.index("AS runtime"):]
    m = re.search(r"apt-get install -y --no-install-recommends (.*?)\s*\\\s*\n\s*&&", runtime, re.S)
    pkgs_df = m.group(1).replace("\\", " ").split()
    h.check_eq(sorted(pkgs_df), sorted(pkgs_sh), "runtime packages of the Dockerfile and of image.sh")
    h.check("USER %d:%d" % (UID, UID) in dockerfile, "the Dockerfile's USER is not %d:%d" % (UID, UID))
    h.check(re.search(r"^uid=%d$" % UID, image_sh, re.M), "image.sh's uid is not %d" % UID)
    for o in OVERLAYS:
        for owner, tpl in pod_specs(render(o)):
            for c in tpl["spec"].get("initContainers", []) + tpl["spec"]["containers"]:
                h.check(c["image"] in names, "overlays/%s %s container %s: image %s is not one of %s"
                        % (o, owner, c["name"], c["image"], names))
                h.check("command" not in c, "%s container %s overrides the ENTRYPOINT" % (owner, c["name"]))


@t.case
def security_contexts_and_resources():
    for o in OVERLAYS:
        for owner, tpl in pod_specs(render(o)):
            spec = tpl["spec"]
            psc = spec.get("securityContext", {})
            what = "overlays/%s %s" % (o, owner)
            h.check_eq(psc.get("runAsNonRoot"), True, what + " runAsNonRoot")
            h.check_eq(psc.get("runAsUser"), UID, what + " runAsUser (the image's user)")
            h.check_eq(psc.get("seccompProfile", {}).get("type"), "RuntimeDefault", what + " seccompProfile")
            h.check_eq(spec.get("automountServiceAccountToken"), False, what + " automountServiceAccountToken")
            h.check("hostNetwork" not in spec and "hostPID" not in spec, what + " uses the host's namespaces")
            for v in spec.get("volumes", []):
                h.check("hostPath" not in v, what + " mounts a hostPath")
            for c in spec.get("initContainers", []) + spec["containers"]:
                csc = c.get("securityContext", {})
                cw = "%s container %s" % (what, c["name"])
                h.check_eq(csc.get("allowPrivilegeEscalation"), False, cw + " allowPrivilegeEscalation")
                h.check_eq(csc.get("readOnlyRootFilesystem"), True, cw + " readOnlyRootFilesystem")
                h.check_eq(csc.get("capabilities", {}).get("drop"), ["ALL"], cw + " capabilities.drop")
                h.check(not csc.get("capabilities", {}).get("add"), cw + " adds capabilities")
                res = c.get("resources", {})
                for k in ("cpu", "memory"):
                    h.check(k in res.get("requests", {}), cw + " has no requests." + k)
                h.check("memory" in res.get("limits", {}), cw + " has no limits.memory")
                h.check(mib(res["requests"]["memory"]) <= mib(res["limits"]["memory"]), cw + " request above limit")
                for e in c.get("env", []):
                    if "PG_DSN" in e["name"]:
                        h.check("secretKeyRef" in e.get("valueFrom", {}), cw + " %s not from a Secret" % e["name"])


def edge_base_mib(threads):
    extra_conns = max(0, 2 + 2 * threads - 4) if threads > 1 else 0
    return EDGE_BASE_MIB + (EDGE_MAILBOX_MIB if threads > 1 else 0) + int(extra_conns * EDGE_CONN_MIB + 0.999)


@t.case
def memory_limits_follow_the_arithmetic():
    """Edge: --max-streams <= (limit - base(threads)) / (4 MiB + socket buffer) (docs/deploy.md
    "Resources"); prod writer limit >= the bound; prod memory requests = limits."""
    for o in OVERLAYS:
        docs = render(o)
        edge = one(docs, "Deployment", "studio-edge")["spec"]["template"]["spec"]["containers"][0]
        limit = mib(edge["resources"]["limits"]["memory"])
        env = env_of(edge)
        streams = int(env["STUDIO_MAX_STREAMS"])
        threads = int(env.get("STUDIO_THREADS") or 1)
        base = edge_base_mib(threads)
        per = EDGE_STREAM_MIB + EDGE_SOCKBUF_MIB
        allowed = (limit - base) // per
        h.check(streams <= allowed, "overlays/%s edge: STUDIO_MAX_STREAMS %d above (%d - base(%d threads) %d) / %d = %d"
                % (o, streams, limit, threads, base, per, allowed))
        h.log("FIGURE overlays/%s edge: limit %d MiB, %d threads, max streams %d (allowed %d)"
              % (o, limit, threads, streams, allowed))
        if o == "prod":
            for owner, tpl in pod_specs(docs):
                for c in tpl["spec"].get("initContainers", []) + tpl["spec"]["containers"]:
                    r = c["resources"]
                    h.check_eq(r["requests"]["memory"], r["limits"]["memory"],
                               "prod %s container %s: memory request = limit" % (owner, c["name"]))
        writer = one(docs, "Deployment", "studio-writer")["spec"]["template"]["spec"]["containers"][0]
        wl = mib(writer["resources"]["limits"]["memory"])
        h.log("FIGURE overlays/%s writer: limit %d MiB against the bound %d MiB" % (o, wl, WRITER_BOUND_MIB))
        if o == "prod":
            h.check(wl >= WRITER_BOUND_MIB, "prod writer limit %d MiB below the bound %d MiB" % (wl, WRITER_BOUND_MIB))


@t.case
def ports_services_and_grace():
    for o in OVERLAYS:
        docs = render(o)
        deps = {d["metadata"]["name"]: d for d in objs(docs, "Deployment")}
        for name, d in deps.items():
            spec = d["spec"]["template"]["spec"]
            c = spec["containers"][0]
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            env = env_of(c)
            # Every container port is where the program listens (its flag).
            listen = {"ingest": env.get("STUDIO_INGEST"), "publish": env.get("STUDIO_PUBLISH"),
                      "http": env.get("STUDIO_HTTP") or env.get("STUDIO_LISTEN"),
                      "metrics": env.get("STUDIO_METRICS_LISTEN")}
            for pn, num in ports.items():
                h.check(listen.get(pn) and listen[pn].endswith(":%d" % num),
                        "overlays/%s %s port %s %d: the program listens on %r" % (o, name, pn, num, listen.get(pn)))
            h.check(env.get("STUDIO_CONTROL", "").startswith("tcp://127.0.0.1:"),
                    "%s control is not on loopback: %r" % (name, env.get("STUDIO_CONTROL")))
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                pr = c.get(probe)
                h.check(pr and pr["httpGet"]["port"] in ports, "%s %s port %r not a container port %s"
                        % (name, probe, pr and pr["httpGet"]["port"], sorted(ports)))
            h.check_eq(c["readinessProbe"]["httpGet"]["path"], "/readyz", name + " readiness path")
            h.check_eq(c["livenessProbe"]["httpGet"]["path"], "/healthz", name + " liveness path")
            tgps = spec["terminationGracePeriodSeconds"]
            if name == "studio-edge":
                grace = int(env["STUDIO_DRAIN_GRACE_S"])
                # The edge exits at the latest grace + 1 s.
                h.check(grace + 1 + 5 <= tgps, "edge terminationGracePeriodSeconds %d not above --drain-grace-s %d"
                        " + 1 + 5 s margin" % (tgps, grace))
                h.check_eq(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0, "edge maxUnavailable")
                wenv = env_of(deps["studio-writer"]["spec"]["template"]["spec"]["containers"][0])
                h.check_eq(env["STUDIO_FLUSH_INTERVAL_MS"], wenv["STUDIO_FLUSH_INTERVAL_MS"],
                           "the edge's and the writers' flush interval")
                m = re.fullmatch(r"tcp://([a-z0-9-]+):(\d+)", env["STUDIO_WRITERS"])
                h.check(m, "STUDIO_WRITERS %r is not tcp://SERVICE:PORT" % env["STUDIO_WRITERS"])
                svc = one(docs, "Service", m.group(1))
                h.check_eq(svc["spec"].get("clusterIP"), "None", "the Service the edges dial is headless")
                h.check_eq([p["port"] for p in svc["spec"]["ports"]], [int(m.group(2))], "its port")
            else:
                # The writer gives up 30 s after SIGTERM (docs/writer.md "Shutdown").
                h.check(tgps >= 30 + 5, "writer terminationGracePeriodSeconds %d not above 30 + 5" % tgps)
            h.check(spec.get("topologySpreadConstraints"), name + " has no topologySpreadConstraints")
        for svc in objs(docs, "Service"):
            sel = svc["spec"]["selector"]
            targets = [d for d in deps.values()
                       if all(d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())]
            h.check_eq(len(targets), 1, "Deployments selected by Service %s" % svc["metadata"]["name"])
            names = {p["name"] for p in targets[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
            for p in svc["spec"]["ports"]:
                h.check(p["targetPort"] in names, "Service %s targetPort %r not in %s"
                        % (svc["metadata"]["name"], p["targetPort"], sorted(names)))
        for np in objs(docs, "NetworkPolicy"):
            sel = np["spec"]["podSelector"]["matchLabels"]
            targets = [d for d in deps.values()
                       if all(d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())]
            h.check_eq(len(targets), 1, "Deployments selected by NetworkPolicy %s" % np["metadata"]["name"])
            names = {p["name"] for p in targets[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
            for rule in np["spec"]["ingress"]:
                for p in rule["ports"]:
                    h.check(p["port"] in names, "NetworkPolicy %s port %r" % (np["metadata"]["name"], p["port"]))
        ingest_rules = [r for r in one(docs, "NetworkPolicy", "studio-writer")["spec"]["ingress"]
                        if any(p["port"] in ("ingest", "publish") for p in r["ports"])]
        h.check(all(r.get("from") for r in ingest_rules), "ingest/publish open to every pod")


@t.case
def metrics_scraped_where_they_are_served():
    """Issue 25 item 6: the edge serves /metrics on STUDIO_METRICS_LISTEN only (404 on its public
    port), so every scrape (PodMonitor, prometheus.io annotations) names that port, no Service
    exposes it, and the NetworkPolicy lets it be scraped; the writer keeps /metrics on http."""
    want = {"studio-edge": "metrics", "studio-writer": "http"}
    for o in OVERLAYS:
        docs = render(o)
        for name, d in ((d["metadata"]["name"], d) for d in objs(docs, "Deployment")):
            tpl = d["spec"]["template"]
            c = tpl["spec"]["containers"][0]
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            h.check(want[name] in ports, "overlays/%s %s has no port %r: %s" % (o, name, want[name], sorted(ports)))
            h.check_eq(tpl["metadata"]["annotations"].get("prometheus.io/port"), str(ports[want[name]]),
                       "overlays/%s %s prometheus.io/port" % (o, name))
            if name == "studio-edge":
                h.check(env_of(c).get("STUDIO_METRICS_LISTEN"), "the edge sets STUDIO_METRICS_LISTEN")
                svc = one(docs, "Service", "studio-edge")
                h.check("metrics" not in [p["targetPort"] for p in svc["spec"]["ports"]],
                        "the edge's public Service exposes /metrics")
                rules = one(docs, "NetworkPolicy", "studio-edge")["spec"]["ingress"]
                h.check(any(p["port"] == "metrics" for r in rules for p in r["ports"]),
                        "the edge's NetworkPolicy does not let the metrics port be scraped")
        if o == "prod":
            mons = objs(docs, "PodMonitor")
            for name, port in want.items():
                sel = [m for m in mons if m["spec"]["selector"].get("matchLabels", {}).get(
                    "app.kubernetes.io/name") == name]
                h.check_eq(len(sel), 1, "PodMonitors selecting %s" % name)
                h.check_eq([(e["port"], e["path"]) for e in sel[0]["spec"]["podMetricsEndpoints"]],
                           [(port, "/metrics")], "the PodMonitor of %s scrapes" % name)


@t.case
def apply_and_gitops_safe():
    """Issue 26: no replicas under an HPA, no Job (immutable template) in the overlays, no deprecated
    kustomize fields, PDBs that let unhealthy pods go, minReadySeconds, zone spread, the database CA."""
    for o in OVERLAYS:
        docs = render(o)
        for hpa in objs(docs, "HorizontalPodAutoscaler"):
            target = one(docs, "Deployment", hpa["spec"]["scaleTargetRef"]["name"])
            h.check("replicas" not in target["spec"], "overlays/%s Deployment %s has replicas %r under an HPA "
                    "(every apply would reset the scaled count)" % (o, target["metadata"]["name"],
                                                                     target["spec"].get("replicas")))
        h.check_eq(objs(docs, "Job"), [], "overlays/%s Jobs (a Job's template is immutable: upgrades break)" % o)
        for pdb in objs(docs, "PodDisruptionBudget"):
            h.check_eq(pdb["spec"].get("unhealthyPodEvictionPolicy"), "AlwaysAllow",
                       "overlays/%s PDB %s unhealthyPodEvictionPolicy" % (o, pdb["metadata"]["name"]))
        for d in objs(docs, "Deployment"):
            name = d["metadata"]["name"]
            h.check(d["spec"].get("minReadySeconds", 0) >= 5, "overlays/%s %s minReadySeconds %r"
                    % (o, name, d["spec"].get("minReadySeconds")))
            keys = [c["topologyKey"] for c in d["spec"]["template"]["spec"].get("topologySpreadConstraints", [])]
            h.check_eq(sorted(keys), ["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
                       "overlays/%s %s spread keys" % (o, name))
        for owner, tpl in pod_specs(docs):
            spec = tpl["spec"]
            vols = {v["name"]: v for v in spec.get("volumes", [])}
            for c in spec.get("initContainers", []) + spec["containers"]:
                env = env_of(c)
                if not any(e["name"] == "STUDIO_PG_DSN" for e in c.get("env", [])):
                    continue
                cw = "overlays/%s %s container %s" % (o, owner, c["name"])
                ca = env.get(PG_CA_ENV)
                h.check(ca, cw + " connects to PostgreSQL without %s (verify-full cannot work)" % PG_CA_ENV)
                mounts = [m for m in c.get("volumeMounts", []) if ca.startswith(m["mountPath"].rstrip("/") + "/")]
                h.check_eq(len(mounts), 1, cw + " mounts for %s=%s" % (PG_CA_ENV, ca))
                v = vols.get(mounts[0]["name"], {})
                h.check_eq(v.get("secret", {}).get("secretName"), PG_CA_SECRET, cw + " CA volume's Secret")
                h.check_eq(os.path.basename(ca), "ca.crt", cw + " CA file name (the Secret's key)")
    for dirpath, _, files in os.walk(K8S):
        for f in files:
            if f == "kustomization.yaml":
                text = open(os.path.join(dirpath, f)).read()
                for field in ("bases", "patchesStrategicMerge", "patchesJson6902", "vars", "commonLabels"):
                    h.check(not re.search(r"^%s:" % field, text, re.M), "%s uses the deprecated field %s"
                            % (os.path.relpath(os.path.join(dirpath, f), ROOT), field))


def rules_of(policy, direction):
    return policy["spec"].get(direction, [])


@t.case
def egress_limited_and_the_ingress_example():
    """Issue 26 item 5: NetworkPolicy egress (DNS, PostgreSQL, and the edges to the writers' publish
    port, nothing else); the Ingress example has what a stream needs and points at the edge Service."""
    import yaml
    dns = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    for o in OVERLAYS:
        docs = render(o)
        for name, extra in (("studio-writer", []),
                            ("studio-edge", [{"to": [{"podSelector": {"matchLabels": {
                                "app.kubernetes.io/name": "studio-writer"}}}],
                                "ports": [{"port": "publish", "protocol": "TCP"}]}])):
            pol = one(docs, "NetworkPolicy", name)
            h.check_eq(sorted(pol["spec"]["policyTypes"]), ["Egress", "Ingress"], "overlays/%s %s policyTypes" % (o, name))
            h.check_eq(rules_of(pol, "egress"), [{"ports": dns}, {"ports": [{"port": PG_PORT, "protocol": "TCP"}]}] + extra,
                       "overlays/%s %s egress rules" % (o, name))
        writer = one(docs, "Deployment", "studio-writer")
        ports = {p["name"] for c in writer["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        h.check("publish" in ports, "overlays/%s: the writer has a port named publish (%s)" % (o, sorted(ports)))
        for d in docs:
            if d["kind"] == "Secret" and "STUDIO_PG_DSN" in d.get("data", {}):
                dsn = base64.b64decode(d["data"]["STUDIO_PG_DSN"]).decode()
                m = re.search(r"\bport=(\d+)", dsn)
                h.check_eq(int(m.group(1)) if m else 5432, PG_PORT, "overlays/%s: the DSN's port is the one egress allows" % o)
    with open(INGRESS_EXAMPLE) as f:
        ing = [d for d in yaml.safe_load_all(f) if d]
    h.check_eq([d["kind"] for d in ing], ["Ingress"], "kinds in the Ingress example")
    ann = ing[0]["metadata"]["annotations"]
    pre = "nginx.ingress.kubernetes.io/"
    h.check_eq(ann.get(pre + "proxy-buffering"), "off", "the example's response buffering")
    h.check_eq(ann.get(pre + "proxy-http-version"), "1.1", "the example's upstream HTTP version")
    for k in ("proxy-read-timeout", "proxy-send-timeout"):
        h.check(int(ann.get(pre + k, "0")) >= 4 * 15, "the example's %s %r is not far above the 15 s heartbeat"
                % (k, ann.get(pre + k)))
    backends = [p["backend"]["service"] for r in ing[0]["spec"]["rules"] for p in r["http"]["paths"]]
    svc = one(render("prod"), "Service", "studio-edge")
    for b in backends:
        h.check_eq(b["name"], "studio-edge", "the example's backend Service")
        h.check(b["port"].get("name") in {p["name"] for p in svc["spec"]["ports"]},
                "the example's backend port %r is a port of Service studio-edge" % b["port"])


def deploy_connection_table():
    """docs/deploy.md "PostgreSQL connections": {overlay: connections at most}."""
    text = open(os.path.join(ROOT, "docs", "deploy.md")).read()
    sec = text.split("### PostgreSQL connections", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| (dev|prod) \|.*\| (\d+) \|$", sec, re.M)
    return {o: int(n) for o, n in rows}


@t.case
def database_connections_at_the_hpa_maximum_are_documented():
    """Issue 26 item 5: the connections the pods of each overlay can hold at once (replicas or the
    HPA's maximum, plus a rollout's surge, plus one migrate) equal the table of docs/deploy.md."""
    fanout = open(os.path.join(ROOT, "edge-gateway", "fanout.h")).read()
    for d in FANOUT_DEFS:
        h.check(d in fanout, "edge-gateway/fanout.h no longer says %r: update edge_pg_conns here and the docs" % d)
    table = deploy_connection_table()
    for o in OVERLAYS:
        docs = render(o)
        total = 0
        for d in objs(docs, "Deployment"):
            name = d["metadata"]["name"]
            hpas = [x for x in objs(docs, "HorizontalPodAutoscaler") if x["spec"]["scaleTargetRef"]["name"] == name]
            n = hpas[0]["spec"]["maxReplicas"] if hpas else d["spec"].get("replicas", 1)
            n += d["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxSurge", 1)
            c = d["spec"]["template"]["spec"]["containers"][0]
            if name == "studio-writer":
                total += n * WRITER_PG_CONNS + MIGRATE_PG_CONNS
            else:
                threads = int(env_of(c).get("STUDIO_THREADS") or 1)
                total += n * edge_pg_conns(threads)
        h.log("overlays/%s: at most %d PostgreSQL connections" % (o, total))
        h.check_eq(table.get(o), total, "overlays/%s connections at most in docs/deploy.md's table" % o)


@t.case
def key_files_come_from_secrets():
    """Issue 26 item 5: the writers' producer keys and the edges' subscriber keys are files of a
    Secret volume (a directory mount, so the kubelet updates them and the programs reload them)."""
    for o in OVERLAYS:
        docs = render(o)
        for dep, var, secret in (("studio-writer", "STUDIO_INGEST_KEYS", "studio-ingest-keys"),
                                 ("studio-edge", "STUDIO_AUTH_KEYS", "studio-auth-keys")):
            spec = one(docs, "Deployment", dep)["spec"]["template"]["spec"]
            c = spec["containers"][0]
            path = env_of(c).get(var)
            what = "overlays/%s %s" % (o, dep)
            h.check(path, "%s sets no %s" % (what, var))
            mounts = [m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")]
            h.check_eq(len(mounts), 1, "%s mounts for %s=%s" % (what, var, path))
            h.check("subPath" not in mounts[0], "%s mounts %s with subPath (never updated by the kubelet)" % (what, var))
            vol = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]][0]
            got = vol.get("secret", {}).get("secretName", "")
            # a generated Secret (dev) carries kustomize's hash suffix
            h.check(re.fullmatch(re.escape(secret) + r"(-[a-z0-9]{10})?", got),
                    "%s %s's volume is Secret %r, not %s" % (what, var, got, secret))
        if o == "dev":
            names = sorted(d["metadata"]["name"].rsplit("-", 1)[0] for d in objs(docs, "Secret"))
            h.check("studio-auth-keys" in names and "studio-ingest-keys" in names, "dev's generated Secrets: %s" % names)


@t.case
def overlays_differ_as_documented():
    dev, prod = render("dev"), render("prod")
    for name in ("studio-writer", "studio-edge"):
        h.check_eq(one(dev, "Deployment", name)["spec"].get("replicas"), 1, "dev replicas of " + name)
    h.check_eq(one(prod, "Deployment", "studio-writer")["spec"]["replicas"], 2, "prod writers")
    h.check_eq(objs(dev, "HorizontalPodAutoscaler"), [], "dev HPA")
    hpa = one(prod, "HorizontalPodAutoscaler", "studio-edge")
    h.check_eq(hpa["spec"]["scaleTargetRef"]["name"], "studio-edge", "HPA target")
    h.check_eq([m["resource"]["name"] for m in hpa["spec"]["metrics"]], ["cpu"], "HPA metrics")
    for name in ("studio-writer", "studio-edge"):
        pdb = one(prod, "PodDisruptionBudget", name)
        labels = one(prod, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        h.check(all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items()),
                "PDB %s selects no pod of its Deployment" % name)
    h.check_eq(objs(prod, "Secret"), [], "Secrets in prod (the operator makes studio-pg)")
    for d in dev + prod:
        # apiVersion is an API group (monitoring.coreos.com/v1), not a host
        text = json.dumps({k: v for k, v in d.items() if k != "apiVersion"})
        h.check(not re.search(r"password|\.com\b|\.net\b|amazonaws|gcr\.io|docker\.io|quay\.io", text),
                "%s/%s names a real host, registry or password" % (d["kind"], d["metadata"]["name"]))


@t.case
def environment_flags_exist_and_probe_paths_are_served():
    """Every STUDIO_* variable set is listed by the program's --help; the probe
    paths answer (200 or 503, not 404) from the real programs."""
    helps = {}
    for prog in ("broker-writer", "edge-gateway"):
        p = sh([h.program(prog), "--help"])
        helps[prog] = p.stdout.decode() + p.stderr.decode()
    paths = {}
    for o in OVERLAYS:
        for owner, tpl in pod_specs(render(o)):
            for c in tpl["spec"].get("initContainers", []) + tpl["spec"]["containers"]:
                prog = program_of(c["image"])
                for e in c.get("env", []):
                    if e["name"] == PG_CA_ENV:
                        continue  # libpq's own variable (the database CA), not the program's
                    h.check("[%s]" % e["name"] in helps[prog], "overlays/%s %s container %s: %s is not in %s --help"
                            % (o, owner, c["name"], e["name"], prog))
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    if probe in c:
                        paths.setdefault(prog, set()).add(c[probe]["httpGet"]["path"])
    if not os.environ.get("STUDIO_TEST_PG_DSN"):
        h.log("STUDIO_TEST_PG_DSN unset: probe paths not asked of the programs")
        return
    # ... by programs that load the dev overlay's key files (the generated Secrets' contents)
    dev = os.path.join(K8S, "overlays", "dev")
    with h.Env() as env:
        w = env.start_writer(ingest_keys=os.path.join(dev, "ingest-keys.json"))
        w.wait_ready()
        e = env.start_edge([w], auth_keys=os.path.join(dev, "auth-keys.json"))
        e.wait_ready()
        for prog, base in (("broker-writer", w.http_url), ("edge-gateway", e.url)):
            for path in sorted(paths[prog]):
                status, _, body = h.http_get(base + path)
                h.check(status in (200, 503), "%s GET %s: %d %r" % (prog, path, status, body[:200]))
        # The edge as the manifests run it: /metrics on its own port only.
        mport = h.free_port()
        e2 = env.start_edge([w], metrics_listen="127.0.0.1:%d" % mport)
        e2.wait_ready()
        status, _, body = h.http_get("http://127.0.0.1:%d/metrics" % mport)
        h.check(status == 200 and b"studio_streams_open" in body, "edge /metrics on --metrics-listen: %d" % status)
        status, _, _ = h.http_get(e2.url + "/metrics")
        h.check_eq(status, 404, "edge /metrics on the public port with --metrics-listen")


if __name__ == "__main__":
    t.main()
