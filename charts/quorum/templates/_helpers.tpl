{{- define "quorum.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "quorum.labels" -}}
app.kubernetes.io/name: quorum
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "quorum.selector" -}}
app.kubernetes.io/name: quorum
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Quorum's ServiceAccount; the pod's own is the scheduler's. */}}
{{- define "quorum.extenderAccount" -}}{{ include "quorum.fullname" . }}-extender{{- end -}}
{{- define "quorum.schedulerAccount" -}}{{ include "quorum.fullname" . }}-scheduler{{- end -}}

{{- define "quorum.leaderElect" -}}
{{- if kindIs "bool" .Values.scheduler.leaderElection -}}{{ .Values.scheduler.leaderElection }}
{{- else -}}{{ gt (int .Values.replicas) 1 }}{{- end -}}
{{- end -}}

{{- define "quorum.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "quorum.fullname" .)) -}}
{{- end -}}
