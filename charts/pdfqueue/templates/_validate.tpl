{{/*
Every check of the values that the schema cannot express, in one place: included from NOTES.txt
and from the API's Deployment, so `helm install` and `helm template` both refuse bad values.
Messages name the value, never its content: tokens must not reach a CI log.
*/}}
{{- define "pdfqueue.validateValues" -}}
{{- include "pdfqueue.validateAuth" . }}
{{- include "pdfqueue.worker.terminationGracePeriodSeconds" . | substr 0 0 }}
{{- end }}

{{/* The API fails closed: tokens or an explicit, unexposed anonymous mode. */}}
{{- define "pdfqueue.validateAuth" -}}
{{- $auth := .Values.auth }}
{{- if not (or $auth.apiTokens $auth.existingSecret $auth.allowAnonymous) }}
{{- fail "auth.apiTokens is empty and auth.existingSecret is unset: the API would refuse to start. Set tokens (or auth.allowAnonymous=true for a private development install)" }}
{{- end }}
{{- if and $auth.allowAnonymous .Values.api.ingress.enabled }}
{{- fail "auth.allowAnonymous=true with api.ingress.enabled=true: an anonymous API is never exposed through an Ingress. Set auth.apiTokens or auth.existingSecret, and auth.allowAnonymous=false" }}
{{- end }}
{{- if and $auth.allowAnonymous (ne .Values.api.service.type "ClusterIP") }}
{{- fail (printf "auth.allowAnonymous=true with api.service.type=%s: an anonymous API stays inside the cluster (ClusterIP)" .Values.api.service.type) }}
{{- end }}
{{- $seen := dict }}
{{- range $tenant, $token := $auth.apiTokens }}
{{- if regexMatch "[,\\s]" $token }}
{{- fail (printf "auth.apiTokens.%s: a token holds no comma or whitespace (value not shown)" $tenant) }}
{{- end }}
{{- if hasPrefix "sha256:" $token }}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $token) }}
{{- fail (printf "auth.apiTokens.%s: a hash is sha256: followed by 64 lowercase hex digits (value not shown)" $tenant) }}
{{- end }}
{{- else if lt (len $token) 32 }}
{{- fail (printf "auth.apiTokens.%s: a plain token needs 32 characters or more (value not shown); make one with `openssl rand -hex 32`, or store its sha256: hash" $tenant) }}
{{- end }}
{{- if hasKey $seen $token }}
{{- fail (printf "auth.apiTokens.%s and auth.apiTokens.%s hold the same token: each tenant needs its own" (get $seen $token) $tenant) }}
{{- end }}
{{- $_ := set $seen $token $tenant }}
{{- end }}
{{- end }}
