{{- define "kollect-hub.fullname" -}}
{{- if contains "kollect-hub" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kollect-hub" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kollect-hub.selectorLabels" -}}
app.kubernetes.io/name: kollect-hub
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kollect-hub.labels" -}}
{{ include "kollect-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kollect
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kollect-hub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kollect-hub.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The data directory is on a claim for SQLite, and for postgres with one replica unless disabled. */}}
{{- define "kollect-hub.persistent" -}}
{{- if and .Values.persistence.enabled (le (int .Values.replicas) 1) -}}true{{- end -}}
{{- end -}}

{{- define "kollect-hub.validate" -}}
{{- if not (has .Values.store.type (list "sqlite" "postgres")) -}}
{{- fail (printf "store.type must be sqlite or postgres, not %q" .Values.store.type) -}}
{{- end -}}
{{- if eq .Values.store.type "sqlite" -}}
{{- if gt (int .Values.replicas) 1 -}}
{{- fail "replicas > 1 needs store.type postgres: the SQLite store belongs to one hub" -}}
{{- end -}}
{{- if not .Values.persistence.enabled -}}
{{- fail "store.type sqlite needs persistence.enabled: the database would be lost with the pod" -}}
{{- end -}}
{{- else -}}
{{- if not .Values.store.postgres.existingSecret -}}
{{- fail "store.type postgres needs store.postgres.existingSecret (a Secret holding the postgres:// URL)" -}}
{{- end -}}
{{- if and (not (include "kollect-hub.persistent" .)) (not .Values.tls.existingSecret) -}}
{{- fail "without a persistent data volume (several replicas, or persistence disabled) the hub needs tls.existingSecret: a generated CA would differ per pod and restart, and agents pin it" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The container image: pinned by digest when image.digest is set, else by tag (default the
chart's appVersion, which the release pipeline publishes). */}}
{{- define "kollect-hub.image" -}}
{{- with .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail (printf "image.digest %q is not a sha256 digest (sha256: and 64 hex digits)" .) -}}
{{- end -}}
{{- printf "%s@%s" $.Values.image.repository . -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
