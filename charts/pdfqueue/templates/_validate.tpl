{{/*
Every check of the values that the schema cannot express, in one place, included from
NOTES.txt only: `helm install`, `helm upgrade`, `helm template` and `helm lint` all render it,
so each of them refuses bad values. Value helpers compute and never fail. Messages name the
value, never its content: tokens and passwords must not reach a CI log.
*/}}
{{- define "pdfqueue.validateValues" -}}
{{- include "pdfqueue.validateAuth" . }}
{{- include "pdfqueue.validateShutdown" . }}
{{- include "pdfqueue.validateLeaderElection" . }}
{{- include "pdfqueue.validatePasswords" . }}
{{- include "pdfqueue.validateExtraEnv" . }}
{{- include "pdfqueue.validateSourcePrefix" . }}
{{- include "pdfqueue.validateNamespaceTenants" . }}
{{- end }}

{{/*
The shutdown rule: terminationGracePeriodSeconds > jobCompletionWaitSeconds > jobTimeoutSeconds + 5
(arq's hard limit is the job's own deadline plus 5 s; see pdfqueue.domain.settings.ARQ_TIMEOUT_MARGIN_S).
*/}}
{{- define "pdfqueue.validateShutdown" -}}
{{- $w := .Values.worker }}
{{- $timeout := addf (float64 $w.jobTimeoutSeconds) 5.0 }}
{{- $wait := float64 $w.jobCompletionWaitSeconds }}
{{- if le $wait $timeout }}
{{- fail (printf "worker.jobCompletionWaitSeconds (%v) must exceed worker.jobTimeoutSeconds + 5 (%v): arq would cut running jobs off at SIGTERM" $w.jobCompletionWaitSeconds $timeout) }}
{{- end }}
{{- $grace := include "pdfqueue.worker.terminationGracePeriodSeconds" . }}
{{- if le (float64 $grace) $wait }}
{{- fail (printf "worker.terminationGracePeriodSeconds (%v) must exceed worker.jobCompletionWaitSeconds (%v): the kubelet would SIGKILL workers still finishing jobs" $grace $w.jobCompletionWaitSeconds) }}
{{- end }}
{{- end }}

{{/* The Lease's timing, as the operator checks it (pdfqueue.domain.settings): retry x 1.1 <
renew deadline <= lease duration - 2 s, so a leader that cannot renew stops before a standby
may take over. */}}
{{- define "pdfqueue.validateLeaderElection" -}}
{{- $e := .Values.operator.leaderElection }}
{{- if not (lt (mulf (float64 $e.retryPeriodSeconds) 1.1) (float64 $e.renewDeadlineSeconds)) }}
{{- fail (printf "operator.leaderElection.retryPeriodSeconds (%v) x 1.1 must be below renewDeadlineSeconds (%v): a leader needs more than one try to renew" $e.retryPeriodSeconds $e.renewDeadlineSeconds) }}
{{- end }}
{{- if gt (float64 $e.renewDeadlineSeconds) (subf (float64 $e.leaseDurationSeconds) 2.0) }}
{{- fail (printf "operator.leaderElection.renewDeadlineSeconds (%v) must be at most leaseDurationSeconds - 2 (%v): a leader that cannot renew must stop before a standby takes over" $e.renewDeadlineSeconds (subf (float64 $e.leaseDurationSeconds) 2.0)) }}
{{- end }}
{{- end }}

{{/* Settings puts a bundled service's password into its URL as it is (arq does not unescape). */}}
{{- define "pdfqueue.validatePasswords" -}}
{{- range $name, $password := dict "redis.password" .Values.redis.password "postgresql.password" .Values.postgresql.password }}
{{- if and $password (not (regexMatch "^[A-Za-z0-9._~-]+$" $password)) }}
{{- fail (printf "%s may hold only A-Z a-z 0-9 - . _ ~ (it goes into a URL as it is; value not shown)" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/* config.extraEnv may replace a chart setting, but never a Secret reference. */}}
{{- define "pdfqueue.validateExtraEnv" -}}
{{- $fromSecrets := list "PDFQUEUE_REDIS_URL" "PDFQUEUE_REDIS_PASSWORD" "PDFQUEUE_DATABASE_URL" "PDFQUEUE_DATABASE_PASSWORD" "PDFQUEUE_API_TOKENS" "PDFQUEUE_API_TOKENS_FILE" "AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY" }}
{{- range $name, $_ := .Values.config.extraEnv }}
{{- if has $name $fromSecrets }}
{{- fail (printf "config.extraEnv.%s: this variable comes from a Secret; set it through the chart's Secret values" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The API files every tenant's PdfBatches in the release namespace: mapping it to one tenant
would make the operator refuse all the others' (an explicit entry wins over the implicit "*"). */}}
{{- define "pdfqueue.validateNamespaceTenants" -}}
{{- $tenant := get .Values.operator.namespaceTenants .Release.Namespace }}
{{- if and .Values.api.createPdfBatches $tenant (ne $tenant "*") }}
{{- fail (printf "operator.namespaceTenants maps the release namespace %s to %s, but api.createPdfBatches files every tenant's PdfBatches there: map it to \"*\" or leave it out" .Release.Namespace $tenant) }}
{{- end }}
{{- end }}

{{/* A PdfBatch manifest must never name an upload or a linked PDF (the schema checks the form). */}}
{{- define "pdfqueue.validateSourcePrefix" -}}
{{- $first := .Values.operator.sourcePrefix | trimAll "/" | splitList "/" | first }}
{{- if has $first (list "uploads" "pdfs") }}
{{- fail (printf "operator.sourcePrefix %q must be a folder other than uploads/ and pdfs/" .Values.operator.sourcePrefix) }}
{{- end }}
{{- end }}

{{/* The API fails closed: tokens or an explicit, unexposed anonymous mode. */}}
{{- define "pdfqueue.validateAuth" -}}
{{- $auth := .Values.auth }}
{{- if not (or $auth.apiTokens $auth.existingSecret $auth.allowAnonymous $auth.oidc.issuer $auth.kubernetesTokens.enabled) }}
{{- fail "auth.apiTokens is empty and auth.existingSecret is unset: the API would refuse to start. Set tokens, auth.oidc or auth.kubernetesTokens (or auth.allowAnonymous=true for a private development install)" }}
{{- end }}
{{- if and $auth.oidc.issuer (not (and $auth.oidc.audience $auth.oidc.jwksUrl)) }}
{{- fail "auth.oidc.issuer is set without auth.oidc.audience and auth.oidc.jwksUrl: set all three" }}
{{- end }}
{{- if and $auth.oidc.pageClientId (not $auth.oidc.issuer) }}
{{- fail "auth.oidc.pageClientId is set without auth.oidc.issuer: the page signs in at the issuer" }}
{{- end }}
{{- if and $auth.allowAnonymous .Values.api.ingress.enabled }}
{{- fail "auth.allowAnonymous=true with api.ingress.enabled=true: an anonymous API is never exposed through an Ingress. Set auth.apiTokens or auth.existingSecret, and auth.allowAnonymous=false" }}
{{- end }}
{{- if and $auth.allowAnonymous (ne .Values.api.service.type "ClusterIP") }}
{{- fail (printf "auth.allowAnonymous=true with api.service.type=%s: an anonymous API stays inside the cluster (ClusterIP)" .Values.api.service.type) }}
{{- end }}
{{- if $auth.existingSecret }}
{{- include "pdfqueue.validateExistingTokens" . }}
{{- else }}
{{- $seen := dict }}
{{- range $tenant, $token := $auth.apiTokens }}
{{- include "pdfqueue.validateToken" (dict "where" (printf "auth.apiTokens.%s" $tenant) "token" $token "seen" $seen) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
auth.existingSecret, when the cluster can be read (`helm install`/`upgrade`, or `helm template
--dry-run=server`): the same checks on its tenant:token list. Offline renders skip them; the
API checks its tokens at start either way.
*/}}
{{- define "pdfqueue.validateExistingTokens" -}}
{{- $auth := .Values.auth }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace $auth.existingSecret }}
{{- if $secret }}
{{- $where := printf "Secret %s key %s" $auth.existingSecret $auth.existingSecretKey }}
{{- if not (hasKey ($secret.data | default dict) $auth.existingSecretKey) }}
{{- fail (printf "%s: no such key (auth.existingSecretKey)" $where) }}
{{- end }}
{{- $seen := dict }}
{{- range $entry := splitList "," (index $secret.data $auth.existingSecretKey | b64dec) }}
{{- $entry = trim $entry }}
{{- if $entry }}
{{- $pair := splitn ":" 2 $entry }}
{{- if or (not $pair._0) (not $pair._1) }}
{{- fail (printf "%s: an entry is not tenant:token (value not shown)" $where) }}
{{- end }}
{{- include "pdfqueue.validateToken" (dict "where" (printf "%s, tenant %s" $where $pair._0) "token" $pair._1 "seen" $seen) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* One token: 32+ plain characters or sha256: + 64 lowercase hex, and not another tenant's.
Call with (dict "where" NAME "token" TOKEN "seen" DICT); never prints the token. */}}
{{- define "pdfqueue.validateToken" -}}
{{- $token := .token }}
{{- if regexMatch "[,\\s]" $token }}
{{- fail (printf "%s: a token holds no comma or whitespace (value not shown)" .where) }}
{{- end }}
{{- if hasPrefix "sha256:" $token }}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $token) }}
{{- fail (printf "%s: a hash is sha256: followed by 64 lowercase hex digits (value not shown)" .where) }}
{{- end }}
{{- else if lt (len $token) 32 }}
{{- fail (printf "%s: a plain token needs 32 characters or more (value not shown); make one with `openssl rand -hex 32`, or store its sha256: hash" .where) }}
{{- end }}
{{- if hasKey .seen $token }}
{{- fail (printf "%s and %s hold the same token: each tenant needs its own" (get .seen $token) .where) }}
{{- end }}
{{- $_ := set .seen $token .where }}
{{- end }}
