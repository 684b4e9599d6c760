{{/*
What NOTES.txt says of the API's tokens: the command that reads each tenant's token from the
tokens Secret (tenant:token pairs, comma separated), or that the Secret keeps only its hash;
with no token at all, the anonymous API's warning.
*/}}
{{- define "pdfqueue.notes.token" -}}
{{- $secret := default (include "pdfqueue.componentName" (dict "ctx" . "component" "api-tokens")) .Values.auth.existingSecret }}
{{- $read := printf "kubectl -n %s get secret %s -o jsonpath='{.data.%s}' | base64 -d | tr , '\\n'" .Release.Namespace $secret (.Values.auth.existingSecretKey | replace "." "\\.") }}
{{- if .Values.auth.existingSecret }}
  export PDFQUEUE_TOKEN="$({{ $read }} | sed -n 's/^<tenant>://p')"
{{- else if .Values.auth.apiTokens }}
{{- range $tenant, $token := .Values.auth.apiTokens }}
{{- if hasPrefix "sha256:" $token }}
  # tenant {{ $tenant }}: the Secret {{ $secret }} holds only its hash; use the token you hashed
{{- else }}
  export PDFQUEUE_TOKEN="$({{ $read }} | sed -n 's/^{{ $tenant }}://p')"   # tenant {{ $tenant }}
{{- end }}
{{- end }}
{{- else }}

WARNING: auth.allowAnonymous is true and no token is set: anyone who reaches the API's Service
can upload. Keep it for a private development install.
{{- end }}
{{- end }}
