{{/*
Pieces of the NetworkPolicies. Each pdfqueue pod gets one policy with both directions: what may
reach it, and the only places it may reach. Pods are chosen by label, never by address, so the
cloud metadata address (169.254.169.254) and the Kubernetes API are out of reach unless a rule
below names them (only the operator's and, with api.createPdfBatches, the API's kubeApi rule).
*/}}

{{/* A peer: pods of this release with one of the given components. Call with (dict "ctx" $ "components" (list ...)). */}}
{{- define "pdfqueue.netpol.releasePods" -}}
- podSelector:
    matchExpressions:
      - {key: app.kubernetes.io/instance, operator: In, values: [{{ .ctx.Release.Name | quote }}]}
      - {key: app.kubernetes.io/part-of, operator: In, values: [pdfqueue]}
      - {key: app.kubernetes.io/component, operator: In, values: [{{ join ", " .components }}]}
{{- end }}

{{/* Ingress to a metrics port from the configured scrapers. Call with (dict "ctx" $ "port" N). */}}
{{- define "pdfqueue.netpol.metricsIngress" -}}
{{- $m := .ctx.Values.networkPolicy.metrics }}
- from:
    - namespaceSelector:
        matchLabels: {{- if $m.namespaceSelector }}{{ toYaml $m.namespaceSelector | nindent 10 }}{{ else }} {}{{ end }}
      podSelector:
        matchLabels: {{- if $m.podSelector }}{{ toYaml $m.podSelector | nindent 10 }}{{ else }} {}{{ end }}
  ports:
    - port: {{ .port }}
      protocol: TCP
{{- end }}

{{/* Egress to the cluster DNS. */}}
{{- define "pdfqueue.netpol.dnsEgress" -}}
{{- $d := .Values.networkPolicy.dns }}
- to:
    - namespaceSelector:
        matchLabels: {{- if $d.namespaceSelector }}{{ toYaml $d.namespaceSelector | nindent 10 }}{{ else }} {}{{ end }}
      podSelector:
        matchLabels: {{- if $d.podSelector }}{{ toYaml $d.podSelector | nindent 10 }}{{ else }} {}{{ end }}
  ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- end }}

{{/*
Egress to one backing service: the bundled pods by label, or the external endpoint's addresses.
Call with (dict "ctx" $ "component" "redis" "bundled" BOOL "port" N "external" .Values.networkPolicy.external.redis).
*/}}
{{- define "pdfqueue.netpol.serviceEgress" -}}
{{- if .bundled }}
- to:
    - podSelector:
        matchLabels:
          {{- include "pdfqueue.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 10 }}
  ports:
    - port: {{ .port }}
      protocol: TCP
{{- else }}
- to:
    {{- range .external.cidrs }}
    - ipBlock:
        cidr: {{ . | quote }}
    {{- else }}
    - ipBlock:
        cidr: 0.0.0.0/0
        {{- with .ctx.Values.networkPolicy.external.except }}
        except: {{ toYaml . | nindent 10 }}
        {{- end }}
    {{- end }}
  ports:
    - port: {{ .external.port }}
      protocol: TCP
{{- end }}
{{- end }}

{{/* Egress to Redis, PostgreSQL and S3, bundled or external: what every pdfqueue process uses. */}}
{{- define "pdfqueue.netpol.backendEgress" -}}
{{- $v := .Values }}
{{- $ext := $v.networkPolicy.external }}
{{- include "pdfqueue.netpol.serviceEgress" (dict "ctx" . "component" "redis" "bundled" $v.redis.enabled "port" 6379 "external" $ext.redis) | trim }}
{{ include "pdfqueue.netpol.serviceEgress" (dict "ctx" . "component" "postgresql" "bundled" $v.postgresql.enabled "port" 5432 "external" $ext.database) | trim }}
{{ include "pdfqueue.netpol.serviceEgress" (dict "ctx" . "component" "s3" "bundled" $v.s3.enabled "port" 7070 "external" $ext.s3) | trim }}
{{- end }}

{{/* Egress to the Kubernetes API server (operator; API with createPdfBatches). */}}
{{- define "pdfqueue.netpol.kubeApiEgress" -}}
{{- $k := .Values.networkPolicy.kubeApi }}
{{- if $k.cidrs }}
- to:
    {{- range $k.cidrs }}
    - ipBlock:
        cidr: {{ . | quote }}
    {{- end }}
  ports:
{{- else }}
- ports:
{{- end }}
    {{- range $k.ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
{{- end }}

{{/* The user's extra egress rules (an OpenTelemetry collector, say). */}}
{{- define "pdfqueue.netpol.extraEgress" -}}
{{- with .Values.networkPolicy.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A bundled service's policy: only this release's pdfqueue pods get in; nothing gets out.
Call with (dict "ctx" $ "component" "redis" "port" "redis"). */}}
{{- define "pdfqueue.netpol.bundled" -}}
{{- $ctx := dict "ctx" .ctx "component" .component }}
{{- /* The migration Job uses the database and the bucket, never Redis. */}}
{{- $clients := list "api" "worker" "operator" "retention" }}
{{- if ne .component "redis" }}{{ $clients = append $clients "migrate" }}{{ end }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  {{- include "pdfqueue.metadata" $ctx | nindent 2 }}
spec:
  podSelector:
    matchLabels:
      {{- include "pdfqueue.selectorLabels" $ctx | nindent 6 }}
  policyTypes: [Ingress, Egress]
  ingress:
    - from:
        {{- include "pdfqueue.netpol.releasePods" (dict "ctx" .ctx "components" $clients) | nindent 8 }}
      ports:
        - port: {{ .port }}
          protocol: TCP
  {{- /* A store answers; it never connects anywhere (not even DNS). */}}
  egress: []
{{- end }}
