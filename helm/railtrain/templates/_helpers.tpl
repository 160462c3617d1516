{{- define "railtrain.fullname" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "railtrain.serviceAccountName" -}}
{{- default (include "railtrain.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "railtrain.labels" -}}
app.kubernetes.io/name: railtrain
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
