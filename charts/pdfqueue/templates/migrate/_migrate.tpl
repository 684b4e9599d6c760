{{/*
`pdfqueue migrate`, once per release. At upgrade it is a pre-upgrade hook: the schema moves
before any pod of the new release starts, and the release's ConfigMap and Secrets exist already.
At install it is an ordinary Job of the release, created beside the bundled PostgreSQL it may
need (a pre-install hook runs before any object of the release exists: no database, no Secret):
nothing older runs then, and the API, workers and operator wait, not ready, until it is done.
*/}}

{{/* The hook annotations of one object of the upgrade's migration, by weight (lower first). */}}
{{- define "pdfqueue.migrate.hook" -}}
{{- if .ctx.Release.IsUpgrade }}
annotations:
  helm.sh/hook: pre-upgrade
  helm.sh/hook-weight: {{ .weight | quote }}
  helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
{{- end }}

{{/* The migration's name: the install's Job is an object of the release, the upgrade's a hook. */}}
{{- define "pdfqueue.migrate.name" -}}
{{- include "pdfqueue.componentName" (dict "ctx" . "component" "migrate") }}{{ if .Release.IsInstall }}-install{{ end }}
{{- end }}

{{/* Non-empty when the chart runs migrations (api.migrate.enabled=false, its old name, still turns them off). */}}
{{- define "pdfqueue.migrate.enabled" -}}
{{- if and .Values.migrations.enabled (dig "migrate" "enabled" true .Values.api) }}true{{ end }}
{{- end }}
