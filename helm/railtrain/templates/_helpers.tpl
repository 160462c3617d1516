{{- define "railtrain.fullname" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "railtrain.serviceAccountName" -}}
{{- default (include "railtrain.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "railtrain.selectorLabels" -}}
app.kubernetes.io/name: railtrain
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "railtrain.labels" -}}
{{ include "railtrain.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "railtrain.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* Pod security "restricted" (https://kubernetes.io/docs/concepts/security/pod-security-standards/): pod level. */}}
{{- define "railtrain.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* ... and container level. */}}
{{- define "railtrain.securityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}
