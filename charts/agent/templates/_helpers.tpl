{{/* Full name of the release's objects; the chart name is not repeated when the release has it. */}}
{{- define "kollect-agent.fullname" -}}
{{- if contains "kollect-agent" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kollect-agent" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kollect-agent.selectorLabels" -}}
app.kubernetes.io/name: kollect-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kollect-agent.labels" -}}
{{ include "kollect-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kollect
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kollect-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kollect-agent.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kollect-agent.webhookService" -}}
{{- printf "%s-webhook" (include "kollect-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kollect-agent.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "kollect-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The ValidatingWebhookConfiguration is cluster-scoped: the namespace keeps two releases apart. */}}
{{- define "kollect-agent.webhookConfig" -}}
{{- printf "%s-%s" .Release.Namespace (include "kollect-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kollect-agent.bootstrapSecret" -}}
{{- default (printf "%s-hub-bootstrap" (include "kollect-agent.fullname" .)) .Values.hub.bootstrapToken.existingSecret -}}
{{- end -}}

{{/* Cluster-scoped names carry the namespace too, so two releases never collide. */}}
{{- define "kollect-agent.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "kollect-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Namespaces whose Secrets the agent reads: the sink namespaces plus its own. */}}
{{- define "kollect-agent.secretNamespaces" -}}
{{- $ns := list .Release.Namespace -}}
{{- range .Values.rbac.sinkNamespaces }}{{ $ns = append $ns . }}{{ end -}}
{{- /* Hub-delivered sinks read Secrets where bundles land (only those labelled kollect.dev/hub-sinks=allow). */ -}}
{{- if .Values.hub.url }}{{ range .Values.hub.namespaces }}{{ if ne . "*" }}{{ $ns = append $ns . }}{{ end }}{{ end }}{{ end -}}
{{- $ns | uniq | toJson -}}
{{- end -}}

{{/* Every Kollect kind, as plural resource names, from the CRDs the chart ships. */}}
{{- define "kollect-agent.kollectResources" -}}
{{- $out := list -}}
{{- range $path, $_ := .Files.Glob "files/crds/*.yaml" -}}
{{- $crd := $.Files.Get $path | fromYaml -}}
{{- $out = append $out (dict "plural" $crd.spec.names.plural "kind" $crd.spec.names.kind "scope" $crd.spec.scope) -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{- define "kollect-agent.validate" -}}
{{- if not .Values.clusterName -}}
{{- fail "clusterName is required: the name of this cluster, stamped on every exported row" -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .Values.clusterName) -}}
{{- fail (printf "clusterName %q must be a DNS label (lower-case letters, digits and '-')" .Values.clusterName) -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: without it every replica would export" -}}
{{- end -}}
{{- if .Values.hub.url -}}
{{- range splitList "," (include "kollect-agent.hubURLs" $) -}}
{{- if not (hasPrefix "https://" (trim .)) -}}
{{- fail "hub.url must start with https:// (the hub always serves TLS); every URL of a list too" -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.hub.caFingerprint) (not .Values.hub.caCert) -}}
{{- fail "hub.url needs hub.caFingerprint or hub.caCert to trust the hub" -}}
{{- end -}}
{{- if and .Values.hub.caFingerprint (not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.hub.caFingerprint)) -}}
{{- fail "hub.caFingerprint must be sha256:<64 lower-case hex digits>, as the hub logs it" -}}
{{- end -}}
{{- if and (not .Values.hub.bootstrapToken.existingSecret) (not .Values.hub.bootstrapToken.token) -}}
{{- fail "hub.url needs hub.bootstrapToken.existingSecret or hub.bootstrapToken.token to register" -}}
{{- end -}}
{{- if has .Release.Namespace .Values.hub.namespaces -}}
{{- fail (printf "hub.namespaces lists %s, the release namespace: it holds the agent's hub credentials and is never open to bundles" .Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.apiServer.cidrs) -}}
{{- fail "networkPolicy.enabled needs networkPolicy.apiServer.cidrs: the agent must reach the API server" -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled .Values.hub.url (not .Values.networkPolicy.hub.cidrs) -}}
{{- fail "networkPolicy.enabled with hub.url needs networkPolicy.hub.cidrs" -}}
{{- end -}}
{{- end -}}

{{/* One NetworkPolicy egress rule from {cidrs: [...], ports: [...]}; a port is a number or {port, protocol}. */}}
{{- define "kollect-agent.egressRule" -}}
- to:
    {{- range .cidrs }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  {{- with .ports }}
  ports:
    {{- range . }}
    {{- if kindIs "map" . }}
    - port: {{ .port }}
      protocol: {{ .protocol | default "TCP" }}
    {{- else }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
    {{- end }}
  {{- end }}
{{- end -}}


{{/* hub.url as the agent's --hub-url: one URL, or the replicas' URLs (a list or a comma-separated string) joined with commas. */}}
{{- define "kollect-agent.hubURLs" -}}
{{- if kindIs "slice" .Values.hub.url -}}
{{- join "," .Values.hub.url -}}
{{- else -}}
{{- .Values.hub.url -}}
{{- end -}}
{{- end -}}

{{/* The container image: pinned by digest when image.digest is set, else by tag (default the
chart's appVersion, which the release pipeline publishes). */}}
{{- define "kollect-agent.image" -}}
{{- with .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail (printf "image.digest %q is not a sha256 digest (sha256: and 64 hex digits)" .) -}}
{{- end -}}
{{- printf "%s@%s" $.Values.image.repository . -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
