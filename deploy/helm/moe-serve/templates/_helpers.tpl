{{/* Names and labels shared by every object of the chart. */}}

{{- define "moe-serve.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "moe-serve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "engine"). */}}
{{- define "moe-serve.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "moe-serve.image" -}}
{{- $tag := .Values.image.tag | default (printf "%s-%s" .Chart.AppVersion (ternary "gpu" "cpu" (eq .Values.engine.device "cuda"))) -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "moe-serve.engineUrl" -}}
{{- printf "http://%s-engine:%d" (include "moe-serve.fullname" .) (int .Values.engine.port) -}}
{{- end -}}

{{- define "moe-serve.redisUrl" -}}
{{- printf "redis://%s-redis:6379/0" (include "moe-serve.fullname" .) -}}
{{- end -}}

{{/* Pod-level settings both Deployments share: pull secrets and the non-root security context. */}}
{{- define "moe-serve.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}
