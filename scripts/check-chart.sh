#!/usr/bin/env bash
# The Helm chart's optional monitoring parts, without a cluster (the e2e suite
# helm_chart checks the rest against an API server, which has no
# prometheus-operator CRDs):
#   - `helm lint` passes with the defaults and with each monitoring.* toggle on;
#   - the defaults render no monitoring object, each toggle renders its own
#     (ServiceMonitor, PodMonitor, the members' PodMonitor, PrometheusRule,
#     the dashboard ConfigMap);
#   - the members' PodMonitor selects member pods in every namespace on port
#     `metrics` and turns their valkey.rs/* labels into cluster, shard,
#     member and role; the operator passes its own image to the exporter;
#   - the PrometheusRule carries the six alerts with the job and namespace
#     filled in, and alertLabels on each; the ConfigMap carries
#     dashboards/valkey-operator.json byte for byte, with the sidecar's label;
#   - the `helm test` pod runs probe-metrics against the metrics Service;
#   - contradictory values are refused (both monitors; a ServiceMonitor
#     without the metrics Service; an unknown key).
# That the dashboard and alerts name only exported metrics is the operator
# crate's test (crates/operator/tests/integration/monitoring.rs).
# Exits 1 at the first failure, naming it. Needs helm (make setup builds it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${VALKEY_RS_CACHE:-$HOME/.cache/valkey-rs}
helm=${HELM_BIN:-$cache/bin/helm-v4.3.2/helm}
chart=deploy/helm/valkey-operator
release=vk
ns=ops

if [[ ! -x $helm ]]; then
  echo "chart: no helm at $helm (make setup builds it, HELM_BIN overrides)" >&2
  exit 1
fi
fail() {
  echo "chart: $*" >&2
  exit 1
}
render() { "$helm" template "$release" "$chart" --namespace "$ns" "$@"; }
kinds() { sed -n 's/^kind: //p' | sort | tr '\n' ' '; }

monitoring_kinds='ConfigMap|PodMonitor|PrometheusRule|ServiceMonitor'
"$helm" lint --quiet "$chart" >/dev/null || fail "helm lint fails with the defaults"
if render | grep -Eq "^kind: ($monitoring_kinds)$"; then
  fail "the defaults render a monitoring object: $(render | kinds)"
fi

for toggle in serviceMonitor podMonitor memberPodMonitor prometheusRule dashboard; do
  set_on="monitoring.$toggle.enabled=true"
  "$helm" lint --quiet "$chart" --set "$set_on" >/dev/null || fail "helm lint fails with $set_on"
  out=$(render --set "$set_on") || fail "helm template fails with $set_on"
  got=$(grep -E "^kind: ($monitoring_kinds)$" <<<"$out" | sed 's/^kind: //' | tr '\n' ' ')
  case $toggle in
    serviceMonitor) want="ServiceMonitor " ;;
    podMonitor | memberPodMonitor) want="PodMonitor " ;;
    prometheusRule) want="PrometheusRule " ;;
    dashboard) want="ConfigMap " ;;
  esac
  [[ $got == "$want" ]] || fail "$set_on renders '$got', want '$want'"
done

# The monitors: the chart's job name and the operator's own namespace label.
for toggle in serviceMonitor podMonitor; do
  out=$(render --set "monitoring.$toggle.enabled=true" --set "monitoring.$toggle.labels.release=kps" \
    --show-only "templates/${toggle,,}.yaml")
  for want in "honorLabels: true" "replacement: valkey-operator" "port: http" "release: kps" \
    "matchNames: [\"$ns\"]" "app.kubernetes.io/instance: $release"; do
    grep -qF -- "$want" <<<"$out" || fail "the $toggle lacks '$want':
$out"
  done
done

# The members' PodMonitor: every namespace, the exporter's port, the pod
# labels as series labels.
out=$(render --set monitoring.memberPodMonitor.enabled=true --set monitoring.memberPodMonitor.labels.release=kps \
  --show-only templates/memberpodmonitor.yaml)
for want in "name: valkey-operator-members" "any: true" "key: valkey.rs/cluster" "operator: Exists" \
  "port: metrics" "path: /metrics" "replacement: valkey-operator-members" "release: kps" \
  "sourceLabels: [__meta_kubernetes_namespace]" "targetLabel: namespace"; do
  grep -qF -- "$want" <<<"$out" || fail "the members' PodMonitor lacks '$want':
$out"
done
for label in cluster shard member role; do
  grep -A1 -F "sourceLabels: [__meta_kubernetes_pod_label_valkey_rs_$label]" <<<"$out" |
    grep -qF "targetLabel: $label" || fail "the members' PodMonitor does not relabel valkey.rs/$label into $label:
$out"
done
grep -qF "matchNames" <<<"$out" && fail "the members' PodMonitor is limited to some namespaces"

# The exporter sidecar runs the operator's own image.
out=$(render --show-only templates/deployment.yaml)
grep -qF -- "- --exporter-image=valkey-operator:$(sed -n 's/^appVersion: *//p' "$chart/Chart.yaml" | tr -d '"')" <<<"$out" ||
  fail "the operator is not given its own image for the exporter:
$out"
out=$(render --show-only templates/deployment.yaml --set image.repository=example/op --set image.tag=1.2.3)
grep -qF -- "- --exporter-image=example/op:1.2.3" <<<"$out" ||
  fail "the exporter image does not follow image.repository and image.tag"

# The alerts.
out=$(render --set monitoring.prometheusRule.enabled=true --set monitoring.prometheusRule.alertLabels.team=db \
  --show-only templates/prometheusrule.yaml)
alerts=$(sed -n 's/^ *- alert: //p' <<<"$out" | sort | tr '\n' ' ')
want="ValkeyBackupTooOld ValkeyClusterNotReady ValkeyClusterPrimariesMisplaced ValkeyClusterRequiredSpreadUnsatisfiable ValkeyClusterSlotsNotServed ValkeyOperatorDown ValkeyReplicaLinkDown "
[[ $alerts == "$want" ]] || fail "the PrometheusRule's alerts are '$alerts', want '$want'"
grep -q "__OPERATOR_" <<<"$out" && fail "a placeholder is left in the PrometheusRule"
grep -qF "absent(up{job=\"valkey-operator\", namespace=\"$ns\"} == 1)" <<<"$out" ||
  fail "ValkeyOperatorDown does not select the chart's job in $ns"
teams=$(grep -c "^ *team: db$" <<<"$out" || true)
[[ $teams == 7 ]] || fail "alertLabels reached $teams of 7 alerts"

# The dashboard, byte for byte.
out=$(render --set monitoring.dashboard.enabled=true --set monitoring.dashboard.namespace=grafana \
  --show-only templates/dashboard.yaml)
grep -qF 'grafana_dashboard: "1"' <<<"$out" || fail "the dashboard ConfigMap lacks the label grafana_dashboard: \"1\""
grep -qF 'namespace: grafana' <<<"$out" || fail "monitoring.dashboard.namespace is not used"
embedded=$(awk '/^  valkey-operator.json: \|-$/ {on=1; next} on && /^    / {print substr($0, 5); next} on && /^$/ {print; next} on {exit}' <<<"$out")
diff -u <(cat "$chart/dashboards/valkey-operator.json") <(printf '%s\n' "$embedded") >/dev/null ||
  fail "the ConfigMap's JSON differs from $chart/dashboards/valkey-operator.json"

# The helm test pod.
out=$(render --show-only templates/tests/test-metrics.yaml)
for want in "helm.sh/hook: test" "- probe-metrics" "--url=http://valkey-operator-metrics.$ns.svc:8080/metrics"; do
  grep -qF -- "$want" <<<"$out" || fail "the helm test pod lacks '$want'"
done

# Refused values.
refused() { # why, args...
  local why=$1
  shift
  if render "$@" >/dev/null 2>&1; then fail "helm template accepts $why"; fi
}
refused "both monitors" --set monitoring.serviceMonitor.enabled=true --set monitoring.podMonitor.enabled=true
refused "a ServiceMonitor without the metrics Service" --set monitoring.serviceMonitor.enabled=true --set metrics.service=false
refused "an unknown monitoring key" --set monitoring.serviceMonitor.intervall=1m
refused "an interval that is no duration" --set monitoring.podMonitor.interval=often

echo "chart: lint and render with each monitoring toggle; alerts, dashboard, monitors, the exporter image and the helm test pod as intended"
