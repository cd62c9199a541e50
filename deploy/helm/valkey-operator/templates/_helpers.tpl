{{- define "valkey-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "valkey-operator.labels" -}}
app.kubernetes.io/name: {{ include "valkey-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "valkey-operator.selector" -}}
app.kubernetes.io/name: {{ include "valkey-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The namespaces to watch, comma-separated (empty: every namespace):
watchNamespaces, plus watchNamespace (the older single-namespace value). */ -}}
{{- define "valkey-operator.watchNamespaces" -}}
{{- $list := list -}}
{{- range .Values.watchNamespaces }}{{ $list = append $list . }}{{ end -}}
{{- with .Values.watchNamespace }}{{ $list = append $list . }}{{ end -}}
{{- $list | uniq | join "," -}}
{{- end -}}
