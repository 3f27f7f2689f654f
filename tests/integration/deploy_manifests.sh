#!/usr/bin/env bash
# deploy/kubernetes/*.yaml pass Kubernetes' published schemas, strictly
# (deploy/validate/validate.mjs: kubernetes-models + the OpenAPI field models
# of @kubernetes/client-node, unknown fields are errors), with every document
# reported; and the validator itself rejects each deliberately broken fixture
# in deploy/validate/fixtures/ with the exact reason.
# Needs node + npm (deploy/validate/ensure-deps.sh installs node_modules with
# `npm ci`, once); exit 77 (skipped) only when node is absent.
set -euo pipefail
SRC="${KDEV_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
V="$SRC/deploy/validate"

rc=0
"$V/ensure-deps.sh" || rc=$?
[ "$rc" -eq 77 ] && { echo "SKIP: node/npm not available"; exit 77; }
[ "$rc" -eq 0 ] || { echo "FAIL: ensure-deps.sh exited $rc"; exit 1; }

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- the shipped manifests ------------------------------------------------------------
cd "$SRC"
out="$tmp/out"
rc=0
node "$V/validate.mjs" >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" -eq 0 ] || fail "validate.mjs exited $rc on deploy/kubernetes"
# Exactly these documents, each reported valid (a file that stops parsing, or
# a document lost, changes the list).
want="ok   deploy/kubernetes/00-namespace.yaml#1 Namespace/kdev-system (v1)
ok   deploy/kubernetes/10-device-plugin.yaml#1 ServiceAccount/kdev-plugin (v1)
ok   deploy/kubernetes/10-device-plugin.yaml#2 ClusterRole/kdev-plugin (rbac.authorization.k8s.io/v1)
ok   deploy/kubernetes/10-device-plugin.yaml#3 ClusterRoleBinding/kdev-plugin (rbac.authorization.k8s.io/v1)
ok   deploy/kubernetes/10-device-plugin.yaml#4 ConfigMap/kdev-plugin-config (v1)
ok   deploy/kubernetes/10-device-plugin.yaml#5 DaemonSet/kdev-plugin (apps/v1)
ok   deploy/kubernetes/10-device-plugin.yaml#6 Service/kdev-plugin-metrics (v1)
ok   deploy/kubernetes/15-mps-control-daemon.yaml#1 DaemonSet/kdev-mps-control-daemon (apps/v1)
ok   deploy/kubernetes/20-dra-plugin.yaml#1 ServiceAccount/kdev-dra-plugin (v1)
ok   deploy/kubernetes/20-dra-plugin.yaml#2 ClusterRole/kdev-dra-plugin (rbac.authorization.k8s.io/v1)
ok   deploy/kubernetes/20-dra-plugin.yaml#3 ClusterRoleBinding/kdev-dra-plugin (rbac.authorization.k8s.io/v1)
ok   deploy/kubernetes/20-dra-plugin.yaml#4 DaemonSet/kdev-dra-plugin (apps/v1)
ok   deploy/kubernetes/30-deviceclasses.yaml#1 DeviceClass/gpu.nvidia.com (resource.k8s.io/v1)
ok   deploy/kubernetes/30-deviceclasses.yaml#2 DeviceClass/mig.nvidia.com (resource.k8s.io/v1)
14 documents in 5 files: all valid"
[ "$(cat "$out")" = "$want" ] || {
  fail "validate.mjs output differs from the expected report:"
  diff <(echo "$want") "$out" || true
}

# --- the validator rejects broken manifests --------------------------------------------
# expect FIXTURE LINE...: validate.mjs exits 1 and prints every LINE exactly.
expect() {
  local fixture=$1; shift
  local f="deploy/validate/fixtures/$fixture" r=0
  node "$V/validate.mjs" "$f" >"$out" 2>&1 || r=$?
  [ "$r" -eq 1 ] || { fail "$fixture: exit $r, want 1"; cat "$out"; }
  local line
  for line in "$@"; do
    grep -qxF -- "$line" "$out" || { fail "$fixture: missing line: $line"; cat "$out"; }
  done
}
F=deploy/validate/fixtures
expect unknown-field.yaml \
  "FAIL $F/unknown-field.yaml#1 DaemonSet/broken (apps/v1)" \
  '     spec.template.spec.tolerations[0].efect: unknown field "efect" (not in V1Toleration)' \
  '     spec.template.spec.containers[0].imagee: unknown field "imagee" (not in V1Container)' \
  "1 documents in 1 files: 1 failed"
expect schema-error.yaml \
  "FAIL $F/schema-error.yaml#1 DaemonSet/broken (apps/v1)" \
  "     schema: /spec/template/spec/containers/0/ports/0/containerPort must be integer" \
  "FAIL $F/schema-error.yaml#2 DeviceClass/broken.example.com (resource.k8s.io/v1)" \
  "     schema: /spec/selectors/0/cel must have required property expression"
expect api-server-rules.yaml \
  "     spec.selector.matchLabels.app: \"broken\" does not match the pod template's labels (the API server rejects this)" \
  '     spec.template.spec.containers[0].volumeMounts[0].name: no volume named "missing-volume" in the pod' \
  "     spec.template.spec.serviceAccountName: no ServiceAccount kdev-system/missing-account defined" \
  '     roleRef.name: no ClusterRole "missing-role" defined' \
  "     subjects[0]: no ServiceAccount kdev-system/missing-account defined" \
  "2 documents in 1 files: 2 failed"
expect unknown-kind.yaml \
  "     unknown apiVersion/kind resource.k8s.io/v1 DeviceClas (not in kubernetes-models)" \
  "     metadata.namespace: required here (a namespaced object would land in the current namespace)"
expect yaml-error.yaml \
  "FAIL $F/yaml-error.yaml#1: YAML: Map keys must be unique at line 10, column 3:"
# Every fixture is exercised above (a new one must come with its expectations).
n=$(ls "$SRC/$F"/*.yaml | wc -l)
[ "$n" -eq 5 ] || fail "$n fixtures in $F, 5 expected here"

# A broken document among valid ones fails the run, and the valid ones are
# still reported.
cp deploy/kubernetes/*.yaml "$tmp/"
sed 's/containerPort: 9410/containerPort: "9410"/' deploy/kubernetes/10-device-plugin.yaml \
  >"$tmp/10-device-plugin.yaml"
r=0
node "$V/validate.mjs" "$tmp"/*.yaml >"$out" 2>&1 || r=$?
[ "$r" -eq 1 ] || fail "one broken document among the manifests: exit $r, want 1"
grep -q "^14 documents in 5 files: 1 failed$" "$out" || { fail "mixed run summary"; cat "$out"; }
[ "$(grep -c '^ok ' "$out")" -eq 13 ] || { fail "mixed run: 13 ok lines expected"; cat "$out"; }

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "PASS"
