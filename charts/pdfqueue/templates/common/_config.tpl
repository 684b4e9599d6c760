{{/*
The settings shared by the API, the workers and the operator, as YAML (no secrets here: they
come from Secret references, see pdfqueue.secretEnv). Each component's own settings are in its
<component>/configmap.yaml.
*/}}
{{- define "pdfqueue.config.shared" -}}
{{- /* operator.namespaceTenants as ns:tenant,... (range runs in key order: renders are stable). */}}
{{- $namespaceTenants := list }}
{{- range $namespace, $tenant := .Values.operator.namespaceTenants }}
{{- $namespaceTenants = append $namespaceTenants (printf "%s:%s" $namespace $tenant) }}
{{- end }}
{{- /* api.tenantQuotas as the JSON Settings reads: snake_case quota names, integer values. */}}
{{- $tenantQuotas := dict }}
{{- range $tenant, $quotas := .Values.api.tenantQuotas }}
{{- $entry := dict }}
{{- range $name, $value := $quotas }}
{{- $_ := set $entry (snakecase $name) ($value | int64) }}
{{- end }}
{{- $_ := set $tenantQuotas $tenant $entry }}
{{- end }}
{{- if .Values.redis.enabled }}
PDFQUEUE_REDIS_URL: {{ include "pdfqueue.redis.url" . | quote }}
{{- end }}
{{- if .Values.postgresql.enabled }}
PDFQUEUE_DATABASE_URL: {{ include "pdfqueue.postgresql.url" . | quote }}
{{- end }}
PDFQUEUE_QUEUE_NAME: {{ .Values.config.queueName | quote }}
PDFQUEUE_USERS_TABLE: {{ .Values.config.usersTable | quote }}
PDFQUEUE_USERS_ID_COLUMN: {{ .Values.config.usersIdColumn | quote }}
PDFQUEUE_USERS_ID_TYPE: {{ .Values.config.usersIdType | quote }}
PDFQUEUE_USERS_EMAIL_COLUMN: {{ .Values.config.usersEmailColumn | quote }}
PDFQUEUE_USERS_LINK_COLUMN: {{ .Values.config.usersLinkColumn | quote }}
PDFQUEUE_USERS_LINK_TEMPLATE: {{ .Values.config.usersLinkTemplate | quote }}
PDFQUEUE_REDIS_STRICT: {{ .Values.config.redisStrict | quote }}
PDFQUEUE_STORAGE_URL: {{ include "pdfqueue.storageUrl" . | quote }}
{{- with include "pdfqueue.s3.endpointUrl" . }}
PDFQUEUE_S3_ENDPOINT_URL: {{ . | quote }}
{{- end }}
PDFQUEUE_S3_PATH_STYLE: {{ .Values.storage.pathStyle | quote }}
PDFQUEUE_S3_SSE: {{ .Values.storage.sse | quote }}
{{- with .Values.storage.sseKmsKeyId }}
PDFQUEUE_S3_SSE_KMS_KEY_ID: {{ . | quote }}
{{- end }}
{{- with .Values.storage.sseTenantKmsKeyIds }}
PDFQUEUE_S3_SSE_TENANT_KMS_KEY_IDS: {{ toJson . | quote }}
{{- end }}
{{- if .Values.tls.redis.caSecret }}
PDFQUEUE_REDIS_CA_FILE: "/etc/pdfqueue/tls/redis/ca.crt"
{{- end }}
{{- if .Values.tls.redis.clientSecret }}
PDFQUEUE_REDIS_CERT_FILE: "/etc/pdfqueue/tls/redis-client/tls.crt"
PDFQUEUE_REDIS_KEY_FILE: "/etc/pdfqueue/tls/redis-client/tls.key"
{{- end }}
{{- if .Values.tls.s3.caSecret }}
PDFQUEUE_S3_CA_FILE: "/etc/pdfqueue/tls/s3/ca.crt"
{{- end }}
PDFQUEUE_S3_CREATE_BUCKET: {{ .Values.storage.createBucket | quote }}
PDFQUEUE_UPLOADS_EXPIRE_DAYS: {{ .Values.storage.uploadsExpireDays | int64 | quote }}
{{- /* Retention: the purge CronJob applies it, the API and workers read the same values. */}}
{{- $tenantDays := dict }}
{{- range $tenant, $days := .Values.retention.tenantDays }}
{{- $_ := set $tenantDays $tenant ($days | int64) }}
{{- end }}
PDFQUEUE_RETENTION_DAYS: {{ .Values.retention.days | int64 | quote }}
PDFQUEUE_TENANT_RETENTION_DAYS: {{ toJson $tenantDays | quote }}
PDFQUEUE_AUDIT_RETENTION_DAYS: {{ .Values.retention.auditDays | int64 | quote }}
AWS_DEFAULT_REGION: {{ .Values.storage.region | quote }}
PDFQUEUE_BATCH_TTL_S: {{ .Values.config.batchTtlSeconds | int64 | quote }}
PDFQUEUE_MAX_MEMBERS: {{ .Values.config.maxMembers | int64 | quote }}
PDFQUEUE_MAX_DIRECTORY_BYTES: {{ .Values.config.maxDirectoryBytes | int64 | quote }}
PDFQUEUE_MAX_PDF_BYTES: {{ .Values.config.maxPdfBytes | int64 | quote }}
PDFQUEUE_MAX_TOTAL_UNCOMPRESSED_BYTES: {{ .Values.config.maxTotalUncompressedBytes | int64 | quote }}
PDFQUEUE_MAX_COMPRESSION_RATIO: {{ .Values.config.maxCompressionRatio | quote }}
PDFQUEUE_MAX_TRIES: {{ .Values.config.maxTries | int64 | quote }}
PDFQUEUE_RETRY_BASE_DELAY_S: {{ .Values.config.retryBaseDelaySeconds | quote }}
PDFQUEUE_RETRY_MAX_DELAY_S: {{ .Values.config.retryMaxDelaySeconds | quote }}
PDFQUEUE_ENQUEUE_CHUNK: {{ .Values.config.enqueueChunk | int64 | quote }}
PDFQUEUE_METRICS_INTERVAL_S: {{ .Values.config.metricsIntervalSeconds | quote }}
{{- /* Job limits are read by the API (it enqueues ingest) and the workers (they enforce them). */}}
PDFQUEUE_JOB_TIMEOUT_S: {{ .Values.worker.jobTimeoutSeconds | quote }}
PDFQUEUE_JOB_COMPLETION_WAIT_S: {{ .Values.worker.jobCompletionWaitSeconds | int64 | quote }}
{{- /* The API's: who sees user ids in reports, and the upload quotas. */}}
PDFQUEUE_TRUSTED_TENANTS: {{ join "," .Values.api.trustedTenants | quote }}
PDFQUEUE_QUOTA_UPLOADS_PER_MINUTE: {{ .Values.api.quotas.uploadsPerMinute | int64 | quote }}
PDFQUEUE_QUOTA_BYTES_PER_DAY: {{ .Values.api.quotas.bytesPerDay | int64 | quote }}
PDFQUEUE_QUOTA_CONCURRENT_BATCHES: {{ .Values.api.quotas.concurrentBatches | int64 | quote }}
PDFQUEUE_QUOTA_RETRIES_PER_HOUR: {{ .Values.api.quotas.retriesPerHour | int64 | quote }}
PDFQUEUE_TENANT_QUOTAS: {{ toJson $tenantQuotas | quote }}
{{- /* The workers': what one page may cost, and whose users a batch may match. */}}
PDFQUEUE_EXTRACT_MAX_PAGE_CHARS: {{ .Values.worker.extractMaxPageChars | int64 | quote }}
{{- with .Values.worker.usersTenantColumn }}
PDFQUEUE_USERS_TENANT_COLUMN: {{ . | quote }}
{{- end }}
{{- /* The operator's: the tenant of each namespace, and where PdfBatch ZIPs may live. */}}
PDFQUEUE_OPERATOR_NAMESPACE_TENANTS: {{ join "," $namespaceTenants | quote }}
PDFQUEUE_OPERATOR_SOURCE_PREFIX: {{ .Values.operator.sourcePrefix | quote }}
{{- with .Values.config.otel.exporterOtlpEndpoint }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ . | quote }}
{{- end }}
{{- with .Values.config.otel.resourceAttributes }}
OTEL_RESOURCE_ATTRIBUTES: {{ . | quote }}
{{- end }}
{{- end }}
