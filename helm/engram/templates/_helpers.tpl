{{/* Names, labels, the image, and what each engram process needs. */}}

{{- define "engram.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "engram.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Resource name of one component: <fullname>-<component>. */}}
{{- define "engram.componentName" -}}
{{- printf "%s-%s" (include "engram.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "engram.selectorLabels" -}}
app.kubernetes.io/name: {{ include "engram.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "engram.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "engram.selectorLabels" . }}
app.kubernetes.io/part-of: engram
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "engram.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "engram.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if .Values.image.registry -}}{{- $repo = printf "%s/%s" .Values.image.registry $repo -}}{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "engram.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "engram.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "engram.secretName" -}}
{{- default (include "engram.fullname" .) .Values.auth.existingSecret -}}
{{- end -}}

{{/* Every component in a fixed order; gRPC ones serve grpc.health.v1. */}}
{{- define "engram.components" -}}
{{- list "storage" "quota" "authz" "indexer" "search" "workspace" "maintenance" "mcp" | toJson -}}
{{- end -}}

{{- define "engram.enabledComponents" -}}
{{- $out := list -}}
{{- range $c := include "engram.components" . | fromJsonArray -}}
{{- if (index $.Values $c).enabled -}}{{- $out = append $out $c -}}{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/* The backends each component talks to (mirrors app/production.py's needs). Search
reads no database when authz is deployed: tokens come from authz, index progress from the
indexer. */}}
{{- define "engram.backends" -}}
{{- $embedder := ne .root.Values.embedder.provider "local" -}}
{{- $searchMongo := ternary (list) (list "mongodb") (.root.Values.authz.enabled | default false) -}}
{{- $b := dict
  "storage" (list "mongodb" "nats")
  "quota" (list "mongodb")
  "authz" (list "mongodb")
  "indexer" (concat (list "mongodb" "nats" "opensearch" "qdrant") (ternary (list "embedder") (list) $embedder))
  "search" (concat $searchMongo (list "opensearch" "qdrant") (ternary (list "embedder") (list) $embedder))
  "workspace" (list "mongodb")
  "maintenance" (list "mongodb" "nats" "opensearch" "qdrant")
  "mcp" (list) -}}
{{- index $b .component | toJson -}}
{{- end -}}

{{/* The engram services each component calls over gRPC (ENGRAM_<CALLEE>_ADDR). Every
service resolves personal access tokens through authz (which alone reads them), when authz
is deployed; search reads the indexer's progress through the indexer. Quota and maintenance reach documents through storage only (quota sums stored
usage for Reconcile; maintenance's jobs read, write, scan and prune through it), and
maintenance reconciles through quota. */}}
{{- define "engram.callees" -}}
{{- $quota := ternary (list "quota") (list) (.root.Values.storage.remoteQuota | default false) -}}
{{- $authz := ternary (list "authz") (list) (.root.Values.authz.enabled | default false) -}}
{{- $indexer := ternary (list "indexer") (list) (.root.Values.indexer.enabled | default false) -}}
{{- $c := dict
  "storage" (concat $quota $authz)
  "quota" (concat (list "storage") $authz)
  "authz" (list)
  "indexer" (concat (list "storage") $authz)
  "search" (concat $indexer $authz)
  "workspace" (concat (list "storage" "search") $authz)
  "maintenance" (concat (list "storage" "quota") $authz)
  "mcp" (ternary (list "workspace" "authz") (list "workspace") (eq .root.Values.mcp.hosted true)) -}}
{{- index $c .component | toJson -}}
{{- end -}}

{{/* Whether a component calls another engram service as the service principal
(ENGRAM_SERVICE_TOKEN): looking up a token at authz needs no identity of its own, but
storage and maintenance record their audit rows there (RecordAuditEvent) as the service. */}}
{{- define "engram.needsServiceToken" -}}
{{- $component := .component -}}
{{- if ne $component "mcp" -}}
{{- range $callee := include "engram.callees" . | fromJsonArray -}}{{- if or (ne $callee "authz") (has $component (list "storage" "maintenance")) -}}true{{- end -}}{{- end -}}
{{- end -}}
{{- end -}}

{{/* host:port of a component's Service. */}}
{{- define "engram.address" -}}
{{- $values := index .root.Values .component -}}
{{- printf "%s.%s.svc:%v" (include "engram.componentName" .) .root.Release.Namespace $values.service.port -}}
{{- end -}}

{{/* The Secret key of a component's MongoDB URI: its own (mongodb.perService), or the
shared one. */}}
{{- define "engram.mongoUriKey" -}}
{{- $key := .root.Values.auth.secretKeys.mongoUri -}}
{{- if .root.Values.mongodb.perService -}}{{- printf "%s_%s" $key (upper .component) -}}{{- else -}}{{- $key -}}{{- end -}}
{{- end -}}

{{/* A component's MongoDB database: its own (mongodb.perService), or the shared one. */}}
{{- define "engram.mongoDatabase" -}}
{{- $m := .root.Values.mongodb -}}
{{- if $m.perService -}}
{{- $own := (index ($m.services | default dict) .component | default dict).database -}}
{{- $own | default (printf "%s_%s" $m.database .component) -}}
{{- else -}}
{{- $m.database -}}
{{- end -}}
{{- end -}}

{{/* The secret settings of a component: env var -> key in the Secret. */}}
{{- define "engram.secretEnv" -}}
{{- $keys := .root.Values.auth.secretKeys -}}
{{- $backends := include "engram.backends" . | fromJsonArray -}}
{{- $env := dict -}}
{{- if has "mongodb" $backends -}}{{- $_ := set $env "ENGRAM_MONGO_URI" (include "engram.mongoUriKey" .) -}}{{- end -}}
{{- if ne .component "mcp" -}}{{- $_ := set $env "ENGRAM_JWT_SECRET" $keys.jwtSecret -}}{{- end -}}
{{- if has "qdrant" $backends -}}{{- $_ := set $env "ENGRAM_QDRANT_API_KEY" $keys.qdrantApiKey -}}{{- end -}}
{{- if has "embedder" $backends -}}{{- $_ := set $env "ENGRAM_OPENAI_API_KEY" $keys.openaiApiKey -}}{{- end -}}
{{- if include "engram.needsServiceToken" . -}}{{- $_ := set $env "ENGRAM_SERVICE_TOKEN" $keys.serviceToken -}}{{- end -}}
{{- if and (eq .component "mcp") (ne .root.Values.mcp.hosted true) -}}{{- $_ := set $env "ENGRAM_TOKEN" $keys.mcpToken -}}{{- end -}}
{{- if eq .component "maintenance" -}}{{- $_ := set $env "ENGRAM_LLM_API_KEY" $keys.llmApiKey -}}{{- end -}}
{{- $env | toJson -}}
{{- end -}}

{{/* Whether the JWKS document is given (as a value or in the existing Secret). */}}
{{- define "engram.hasJwks" -}}
{{- if .Values.auth.existingSecret -}}{{- if .Values.auth.existingSecretHasJwks -}}true{{- end -}}{{- else if .Values.auth.jwks -}}true{{- end -}}
{{- end -}}

{{/* ENGRAM_* settings of a component: the chart's, then `config`, then `<component>.config`. */}}
{{- define "engram.settings" -}}
{{- $v := .root.Values -}}
{{- $values := index $v .component -}}
{{- $backends := include "engram.backends" . | fromJsonArray -}}
{{- $s := dict "ENGRAM_LOG_LEVEL" $v.logLevel "ENGRAM_LOG_FORMAT" "json" -}}
{{- if ne .component "mcp" -}}
{{- $_ := set $s "ENGRAM_GRPC_HOST" "0.0.0.0" -}}
{{- $_ := set $s "ENGRAM_GRPC_PORT" (toString $values.containerPorts.grpc) -}}
{{- $_ := set $s "ENGRAM_METRICS_HOST" "0.0.0.0" -}}
{{- $_ := set $s "ENGRAM_METRICS_PORT" (toString $values.containerPorts.metrics) -}}
{{- $_ := set $s "ENGRAM_DATA_DIR" "/var/lib/engram" -}}
{{- end -}}
{{- if has "mongodb" $backends -}}{{- $_ := set $s "ENGRAM_MONGO_DB" (include "engram.mongoDatabase" .) -}}{{- end -}}
{{- if ne .component "mcp" -}}
{{- with $v.auth.audience }}{{- $_ := set $s "ENGRAM_JWT_AUDIENCE" . -}}{{- end -}}
{{- with $v.auth.issuer }}{{- $_ := set $s "ENGRAM_JWT_ISSUER" . -}}{{- end -}}
{{- if include "engram.hasJwks" .root -}}{{- $_ := set $s "ENGRAM_JWKS_PATH" "/etc/engram/jwks/jwks.json" -}}{{- end -}}
{{- end -}}
{{- if and (has "nats" $backends) $v.nats.url -}}{{- $_ := set $s "ENGRAM_NATS_URL" $v.nats.url -}}{{- end -}}
{{- if has "opensearch" $backends -}}
{{- with $v.opensearch.url }}{{- $_ := set $s "ENGRAM_OPENSEARCH_URL" . -}}{{- end -}}
{{- $_ := set $s "ENGRAM_OPENSEARCH_INDEX" $v.opensearch.index -}}
{{- end -}}
{{- if and (has "qdrant" $backends) $v.qdrant.url -}}{{- $_ := set $s "ENGRAM_QDRANT_URL" $v.qdrant.url -}}{{- end -}}
{{- if or (eq .component "indexer") (eq .component "search") -}}
{{- $_ := set $s "ENGRAM_EMBEDDER_PROVIDER" $v.embedder.provider -}}
{{- end -}}
{{- range $callee := include "engram.callees" . | fromJsonArray -}}
{{- if and (eq $.component "mcp") (eq $callee "workspace") -}}
{{- $_ := set $s "ENGRAM_ADDR" (include "engram.address" (dict "root" $.root "component" $callee)) -}}
{{- else -}}
{{- $_ := set $s (printf "ENGRAM_%s_ADDR" (upper $callee)) (include "engram.address" (dict "root" $.root "component" $callee)) -}}
{{- end -}}
{{- end -}}
{{- if $v.tls.enabled -}}
{{- if ne .component "mcp" -}}
{{- $_ := set $s "ENGRAM_TLS_CERT_FILE" "/etc/engram/tls/tls.crt" -}}
{{- $_ := set $s "ENGRAM_TLS_KEY_FILE" "/etc/engram/tls/tls.key" -}}
{{- if $v.tls.mtls }}{{- $_ := set $s "ENGRAM_TLS_CLIENT_CA_FILE" "/etc/engram/tls/ca.crt" -}}{{- end -}}
{{- end -}}
{{- if include "engram.callees" . | fromJsonArray -}}
{{- if ne .component "mcp" }}{{- $_ := set $s "ENGRAM_TLS_INTERNAL" "true" -}}{{- end -}}
{{- $_ := set $s "ENGRAM_TLS_CA_FILE" "/etc/engram/tls/ca.crt" -}}
{{- if $v.tls.mtls -}}
{{- $_ := set $s "ENGRAM_TLS_CLIENT_CERT_FILE" "/etc/engram/tls/tls.crt" -}}
{{- $_ := set $s "ENGRAM_TLS_CLIENT_KEY_FILE" "/etc/engram/tls/tls.key" -}}
{{- end -}}
{{- with $v.tls.serverName }}{{- $_ := set $s "ENGRAM_TLS_SERVER_NAME" . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (eq .component "workspace") $values.templates -}}
{{- $_ := set $s "ENGRAM_WORKSPACE_TEMPLATES" "/etc/engram/templates" -}}
{{- end -}}
{{- if eq .component "mcp" -}}
{{- with $values.timeZone }}{{- $_ := set $s "ENGRAM_TIME_ZONE" . -}}{{- end -}}
{{- end -}}
{{- range $k, $val := $v.config }}{{- $_ := set $s $k (toString $val) -}}{{- end -}}
{{- range $k, $val := $values.config }}{{- $_ := set $s $k (toString $val) -}}{{- end -}}
{{- $s | toJson -}}
{{- end -}}

{{/* Settings the chart owns: set through typed values, never through `config`. */}}
{{- define "engram.checkConfig" -}}
{{- $owned := dict
  "ENGRAM_GRPC_HOST" "the chart binds every service to 0.0.0.0"
  "ENGRAM_GRPC_PORT" "set <service>.containerPorts.grpc"
  "ENGRAM_METRICS_HOST" "the chart binds metrics to 0.0.0.0"
  "ENGRAM_METRICS_PORT" "set <service>.containerPorts.metrics"
  "ENGRAM_MONGO_URI" "set mongodb.services.<service>.uri (or mongodb.uri without mongodb.perService) or auth.existingSecret"
  "ENGRAM_JWT_SECRET" "set auth.jwtSecret or auth.existingSecret"
  "ENGRAM_SERVICE_TOKEN" "set auth.serviceToken or auth.existingSecret"
  "ENGRAM_QDRANT_API_KEY" "set qdrant.apiKey or auth.existingSecret"
  "ENGRAM_OPENAI_API_KEY" "set embedder.openaiApiKey or auth.existingSecret"
  "ENGRAM_TOKEN" "set mcp.token or auth.existingSecret"
  "ENGRAM_LLM_API_KEY" "set dreaming.llmApiKey or auth.existingSecret"
  "ENGRAM_JWKS_PATH" "set auth.jwks or auth.existingSecret (mounted as a file)" -}}
{{- $sources := dict "config" .Values.config -}}
{{- range $c := include "engram.components" . | fromJsonArray -}}
{{- $_ := set $sources (printf "%s.config" $c) (index $.Values $c).config -}}
{{- end -}}
{{- range $where, $config := $sources -}}
{{- range $k, $_ := $config -}}
{{- if hasKey $owned $k -}}
{{- fail (printf "%s.%s cannot be set there: %s" $where $k (index $owned $k)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "engram.topologySpread" -}}
{{- $values := index .root.Values .component -}}
{{- if $values.topologySpreadConstraints -}}
{{- toYaml $values.topologySpreadConstraints -}}
{{- else -}}
{{- $spread := .root.Values.topologySpread -}}
{{- range $key := $spread.topologyKeys }}
- maxSkew: {{ $spread.maxSkew }}
  topologyKey: {{ $key }}
  whenUnsatisfiable: {{ $spread.whenUnsatisfiable }}
  labelSelector:
    matchLabels:
      {{- include "engram.selectorLabels" $ | nindent 6 }}
  matchLabelKeys:
    - pod-template-hash
{{- end }}
{{- end -}}
{{- end -}}

{{/* Whether a component's replicas follow an HPA (mcp: only hosted, one token per pod otherwise). */}}
{{- define "engram.autoscaled" -}}
{{- $values := index .root.Values .component -}}
{{- if and $values.autoscaling $values.autoscaling.enabled (or (ne .component "mcp") (eq $values.hosted true)) -}}true{{- end -}}
{{- end -}}

{{/* The hosted MCP endpoint's public URL (its RFC 9728 resource). */}}
{{- define "engram.mcpResourceUrl" -}}
{{- $values := .root.Values.mcp -}}
{{- $values.resourceUrl | default (printf "http://%s.%s.svc:%v/mcp" (include "engram.componentName" .) .root.Release.Namespace $values.service.port) -}}
{{- end -}}
