// Validates Kubernetes objects against the API schema with the npm package
// kubernetes-models (its classes carry the OpenAPI schema of the API).
// Input on stdin: a JSON array of objects. Output: one line per object,
// "ok KIND/NAME" or "error KIND/NAME: MESSAGE"; exit 1 when any is invalid.
// Note: the schema checks types, required fields, enums and formats; it does
// not refuse unknown fields (test_manifests.py's own rules cover the fields
// that matter).
"use strict";
const CRD_PACKAGES = { "monitoring.coreos.com": "@kubernetes-models/prometheus-operator" };
const input = require("fs").readFileSync(0, "utf8");
let bad = 0;
for (const obj of JSON.parse(input)) {
  const what = `${obj.kind}/${obj.metadata && obj.metadata.name}`;
  let Model;
  try {
    const group = obj.apiVersion; // "v1", "apps/v1", "networking.k8s.io/v1"
    // Custom resources come from their own package of the same project:
    // prometheus-operator's (PrometheusRule, PodMonitor of the prod overlay).
    const pkg = CRD_PACKAGES[group.split("/")[0]] || "kubernetes-models";
    Model = require(`${pkg}/${group}/${obj.kind}`)[obj.kind];
  } catch (e) {
    console.log(`error ${what}: no schema for apiVersion ${obj.apiVersion} kind ${obj.kind}`);
    bad++;
    continue;
  }
  try {
    new Model(obj).validate();
    console.log(`ok ${what}`);
  } catch (e) {
    console.log(`error ${what}: ${String(e.message).replace(/\n/g, "; ")}`);
    bad++;
  }
}
process.exit(bad ? 1 : 0);
