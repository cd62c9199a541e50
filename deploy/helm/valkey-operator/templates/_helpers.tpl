{{- define "valkey-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "valkey-operator.labels" -}}
app.kubernetes.io/name: {{ include "valkey-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- /* The operator's image reference; the member pods' exporter sidecar
runs the same image (`valkey-operator run --exporter-image`). */ -}}
{{- define "valkey-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "valkey-operator.selector" -}}
app.kubernetes.io/name: {{ include "valkey-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The selector labels as `key=value,...` (the operator's --operator-pod-labels). */ -}}
{{- define "valkey-operator.selectorArg" -}}
{{- $pairs := list -}}
{{- range $k, $v := include "valkey-operator.selector" . | fromYaml -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{- /* The namespaces to watch, comma-separated (empty: every namespace):
watchNamespaces, plus watchNamespace (the older single-namespace value). */ -}}
{{- define "valkey-operator.watchNamespaces" -}}
{{- $list := list -}}
{{- range .Values.watchNamespaces }}{{ $list = append $list . }}{{ end -}}
{{- with .Values.watchNamespace }}{{ $list = append $list . }}{{ end -}}
{{- $list | uniq | join "," -}}
{{- end -}}

{{- /* The job label of the operator's scrape targets, whichever monitor
scrapes them: the ValkeyOperatorDown alert selects it. */ -}}
{{- define "valkey-operator.job" -}}
{{- include "valkey-operator.name" . -}}
{{- end -}}

{{- /* What the ServiceMonitor and the PodMonitor share: the operator's own
`namespace` label (each ValkeyCluster's namespace) is kept rather than
renamed exported_namespace, and the job is the chart's name rather than the
Service's or `<namespace>/<monitor>`. */ -}}
{{- define "valkey-operator.monitorLabels" -}}
honorLabels: true
relabelings:
  - action: replace
    targetLabel: job
    replacement: {{ include "valkey-operator.job" . }}
{{- end -}}
