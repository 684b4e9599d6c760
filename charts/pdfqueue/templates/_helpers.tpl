{{/*
Names, labels, images and the environment shared by the pdfqueue templates.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "pdfqueue.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-<chart> (or the release name alone when it already contains the chart name), max 63 chars. */}}
{{- define "pdfqueue.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The name of one component's objects: <fullname>-<component>. Call with (dict "ctx" $ "component" "api"). */}}
{{- define "pdfqueue.componentName" -}}
{{- printf "%s-%s" (include "pdfqueue.fullname" .ctx | trunc 50 | trimSuffix "-") .component }}
{{- end }}

{{/* chart label value: <name>-<version>. */}}
{{- define "pdfqueue.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: name, instance, component only (immutable on Deployments/StatefulSets). */}}
{{- define "pdfqueue.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pdfqueue.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* All labels of a component's objects. Call with (dict "ctx" $ "component" "api"). */}}
{{- define "pdfqueue.labels" -}}
helm.sh/chart: {{ include "pdfqueue.chart" .ctx }}
{{ include "pdfqueue.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: pdfqueue
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* repository:tag (tag defaults to appVersion) or repository@digest. Call with (dict "ctx" $ "image" .Values.api.image). */}}
{{- define "pdfqueue.image" -}}
{{- if .image.digest -}}
{{ .image.repository }}@{{ .image.digest }}
{{- else -}}
{{ .image.repository }}:{{ .image.tag | default .ctx.Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* The ServiceAccount of a component. Call with (dict "ctx" $ "component" "api"). */}}
{{- define "pdfqueue.serviceAccountName" -}}
{{- if .ctx.Values.serviceAccount.create }}
{{- include "pdfqueue.componentName" . }}
{{- else }}
{{- default "default" (get .ctx.Values.serviceAccount.names .component) }}
{{- end }}
{{- end }}

{{/* imagePullSecrets of a pod spec. */}}
{{- define "pdfqueue.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A generated secret that survives upgrades: the value already in the cluster if the Secret
exists, else the given value, else a random one. Call with
(dict "ctx" $ "secret" NAME "key" KEY "value" GIVEN "length" N).
*/}}
{{- define "pdfqueue.secretValue" -}}
{{- if .value }}
{{- .value }}
{{- else }}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .secret }}
{{- if and $existing (hasKey $existing.data .key) }}
{{- index $existing.data .key | b64dec }}
{{- else }}
{{- randAlphaNum (.length | default 32) }}
{{- end }}
{{- end }}
{{- end }}

{{/* ---- backing services: where they are and which Secret holds their credentials ---- */}}

{{- define "pdfqueue.redis.secretName" -}}
{{- if .Values.redis.enabled }}
{{- default (include "pdfqueue.componentName" (dict "ctx" . "component" "redis")) .Values.redis.existingSecret }}
{{- else }}
{{- default (include "pdfqueue.componentName" (dict "ctx" . "component" "external")) .Values.externalRedis.existingSecret }}
{{- end }}
{{- end }}

{{- define "pdfqueue.postgresql.secretName" -}}
{{- if .Values.postgresql.enabled }}
{{- default (include "pdfqueue.componentName" (dict "ctx" . "component" "postgresql")) .Values.postgresql.existingSecret }}
{{- else }}
{{- default (include "pdfqueue.componentName" (dict "ctx" . "component" "external")) .Values.externalDatabase.existingSecret }}
{{- end }}
{{- end }}

{{- define "pdfqueue.s3.secretName" -}}
{{- if .Values.s3.enabled }}
{{- default (include "pdfqueue.componentName" (dict "ctx" . "component" "s3")) .Values.s3.existingSecret }}
{{- else }}
{{- default (include "pdfqueue.componentName" (dict "ctx" . "component" "external")) .Values.externalS3.existingSecret }}
{{- end }}
{{- end }}

{{/* Does the chart's own <fullname>-external Secret have anything to hold? */}}
{{- define "pdfqueue.external.needsSecret" -}}
{{- $v := .Values }}
{{- if or (and (not $v.redis.enabled) (not $v.externalRedis.existingSecret))
          (and (not $v.postgresql.enabled) (not $v.externalDatabase.existingSecret))
          (and (not $v.s3.enabled) (not $v.externalS3.existingSecret) $v.externalS3.accessKeyId) }}
{{- "true" }}
{{- end }}
{{- end }}

{{/* Are there S3 credentials to pass as AWS_* at all? (none: IAM roles for service accounts) */}}
{{- define "pdfqueue.s3.hasCredentials" -}}
{{- if or .Values.s3.enabled .Values.externalS3.existingSecret .Values.externalS3.accessKeyId }}
{{- "true" }}
{{- end }}
{{- end }}

{{- define "pdfqueue.s3.accessKeyIdKey" -}}
{{- if .Values.s3.enabled }}access-key-id{{ else if .Values.externalS3.existingSecret }}{{ .Values.externalS3.accessKeyIdKey }}{{ else }}access-key-id{{ end }}
{{- end }}

{{- define "pdfqueue.s3.secretAccessKeyKey" -}}
{{- if .Values.s3.enabled }}secret-access-key{{ else if .Values.externalS3.existingSecret }}{{ .Values.externalS3.secretAccessKeyKey }}{{ else }}secret-access-key{{ end }}
{{- end }}

{{- define "pdfqueue.s3.endpointUrl" -}}
{{- if .Values.s3.enabled }}
{{- printf "http://%s:7070" (include "pdfqueue.componentName" (dict "ctx" . "component" "s3")) }}
{{- else }}
{{- .Values.externalS3.endpointUrl }}
{{- end }}
{{- end }}

{{- define "pdfqueue.storageUrl" -}}
{{- $prefix := .Values.storage.prefix | trimPrefix "/" | trimSuffix "/" }}
{{- if $prefix }}
{{- printf "s3://%s/%s" .Values.storage.bucket $prefix }}
{{- else }}
{{- printf "s3://%s" .Values.storage.bucket }}
{{- end }}
{{- end }}

{{/* The bundled services' URLs, without passwords: those come from Secrets (pdfqueue.secretEnv). */}}
{{- define "pdfqueue.redis.url" -}}
{{- printf "redis://%s:6379/0" (include "pdfqueue.componentName" (dict "ctx" . "component" "redis")) }}
{{- end }}

{{- define "pdfqueue.postgresql.url" -}}
{{- $host := include "pdfqueue.componentName" (dict "ctx" . "component" "postgresql") }}
{{- printf "postgresql://%s@%s:5432/%s" .Values.postgresql.username $host .Values.postgresql.database }}
{{- end }}

{{/*
The only env entries of a pdfqueue container: references to the Secrets holding credentials.
Everything else comes from ConfigMaps (envFrom). A bundled service's password is its own
variable, which Settings puts into the URL from the ConfigMap (PDFQUEUE_REDIS_PASSWORD,
PDFQUEUE_DATABASE_PASSWORD); an external service's URL is a secret as a whole.
*/}}
{{- define "pdfqueue.secretEnv" -}}
{{- if .Values.redis.enabled }}
- name: PDFQUEUE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "pdfqueue.redis.secretName" . }}
      key: {{ .Values.redis.existingSecretKey }}
{{- else }}
- name: PDFQUEUE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "pdfqueue.redis.secretName" . }}
      key: {{ .Values.externalRedis.existingSecretKey }}
{{- end }}
{{- if .Values.postgresql.enabled }}
- name: PDFQUEUE_DATABASE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "pdfqueue.postgresql.secretName" . }}
      key: {{ .Values.postgresql.existingSecretKey }}
{{- else }}
- name: PDFQUEUE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "pdfqueue.postgresql.secretName" . }}
      key: {{ .Values.externalDatabase.existingSecretKey }}
{{- end }}
{{- if include "pdfqueue.s3.hasCredentials" . }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "pdfqueue.s3.secretName" . }}
      key: {{ include "pdfqueue.s3.accessKeyIdKey" . }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "pdfqueue.s3.secretName" . }}
      key: {{ include "pdfqueue.s3.secretAccessKeyKey" . }}
{{- end }}
{{- end }}

{{/*
A pdfqueue container's envFrom: its component's ConfigMap, then the shared one (which holds
config.extraEnv, so those win). Call with (dict "ctx" $ "component" "api").
*/}}
{{- define "pdfqueue.envFrom" -}}
- configMapRef:
    name: {{ include "pdfqueue.componentName" . }}
- configMapRef:
    name: {{ include "pdfqueue.componentName" (dict "ctx" .ctx "component" "config") }}
{{- end }}

{{/* Roll a component's pods when their configuration changes. Call with (dict "ctx" $ "component" "api"). */}}
{{- define "pdfqueue.configChecksum" -}}
{{- $own := include (printf "%s/%s/configmap.yaml" .ctx.Template.BasePath .component) .ctx }}
{{- $shared := include (print .ctx.Template.BasePath "/common/configmap.yaml") .ctx }}
{{- print $own $shared | sha256sum }}
{{- end }}

{{/*
A container's probe .name (livenessProbe, readinessProbe) when the component's .values enable
it: the chart's .handler and the timings of the values, at a container's indent.
Call with (dict "name" "livenessProbe" "values" .Values.api "handler" (dict "httpGet" ...)).
*/}}
{{- define "pdfqueue.probe" -}}
{{- $probe := index .values .name }}
{{- if $probe.enabled }}
{{- printf "%s:" .name | nindent 10 }}
{{- toYaml (merge (omit $probe "enabled") .handler) | nindent 12 }}
{{- end }}
{{- end }}

{{/*
The name, namespace and labels of a component's object, under `metadata:`: every namespaced
object of the chart has all three. Call with the component's $ctx; a "suffix" in it ends the
object's name.
*/}}
{{- define "pdfqueue.metadata" -}}
name: {{ include "pdfqueue.componentName" . }}{{ .suffix | default "" }}
namespace: {{ .ctx.Release.Namespace }}
labels:
  {{- include "pdfqueue.labels" . | nindent 2 }}
{{- end }}

{{/*
A component's pod metadata: its labels and podLabels; the config checksum (a change of
configuration rolls the pods) and its podAnnotations. Call with the component's $ctx.
*/}}
{{- define "pdfqueue.podMetadata" -}}
{{- $values := index .ctx.Values .component -}}
labels:
  {{- include "pdfqueue.labels" . | nindent 2 }}
  {{- with $values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  checksum/config: {{ include "pdfqueue.configChecksum" . }}
  {{- with $values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
A bundled service's Secret with its one password (generated unless given, kept on upgrade),
under its existingSecretKey. Call with (dict "ctx" $ "component" "redis").
*/}}
{{- define "pdfqueue.passwordSecret" -}}
{{- $values := index .ctx.Values .component }}
{{- $name := include "pdfqueue.componentName" . }}
{{- $password := dict "ctx" .ctx "secret" $name "key" $values.existingSecretKey "value" $values.password }}
apiVersion: v1
kind: Secret
metadata:
  {{- include "pdfqueue.metadata" . | nindent 2 }}
type: Opaque
data:
  {{ $values.existingSecretKey }}: {{ include "pdfqueue.secretValue" $password | b64enc | quote }}
{{- end }}

{{/*
The RoleBinding of a component's Role (of the same name) to its ServiceAccount, in the
release's namespace. Call with the component's $ctx (a "suffix" in it ends both names).
*/}}
{{- define "pdfqueue.roleBinding" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  {{- include "pdfqueue.metadata" . | nindent 2 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "pdfqueue.componentName" . }}{{ .suffix | default "" }}
subjects:
  - kind: ServiceAccount
    name: {{ include "pdfqueue.serviceAccountName" . }}
    namespace: {{ .ctx.Release.Namespace }}
{{- end }}

{{/*
A component's ServiceAccount, with serviceAccount.annotations. With .automount false, pods
get no token unless they ask for one. Call with (dict "ctx" $ "component" "api" "automount" false).
*/}}
{{- define "pdfqueue.serviceAccount" -}}
{{- $ctx := dict "ctx" .ctx "component" .component }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "pdfqueue.serviceAccountName" $ctx }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "pdfqueue.labels" $ctx | nindent 4 }}
  {{- with .ctx.Values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- if hasKey . "automount" }}
automountServiceAccountToken: {{ .automount }}
{{- end }}
{{- end }}

{{/*
A component's headless Service for one named container port: a bundled service's (the
StatefulSet's governing Service, and the clients' address) or a /metrics port's (for the
ServiceMonitor to find each pod). Call with
(dict "ctx" $ "component" "worker" "port" 9100 "portName" "metrics" "suffix" "-metrics");
portName defaults to the component, suffix to none.
*/}}
{{- define "pdfqueue.headlessService" -}}
{{- $ctx := dict "ctx" .ctx "component" .component "suffix" .suffix }}
{{- $portName := .portName | default .component }}
apiVersion: v1
kind: Service
metadata:
  {{- include "pdfqueue.metadata" $ctx | nindent 2 }}
spec:
  clusterIP: None
  selector:
    {{- include "pdfqueue.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: {{ $portName }}
      port: {{ .port }}
      targetPort: {{ $portName }}
      protocol: TCP
{{- end }}

{{/*
The `data` volume claim of a bundled service's StatefulSet, as its persistence values say.
Call with the component's $ctx (dict "ctx" . "component" "redis").
*/}}
{{- define "pdfqueue.dataVolumeClaim" -}}
{{- $persistence := (index .ctx.Values .component).persistence -}}
- metadata:
    name: data
    labels:
      {{- include "pdfqueue.selectorLabels" . | nindent 6 }}
  spec:
    accessModes: [ReadWriteOnce]
    {{- with $persistence.storageClass }}
    storageClassName: {{ . | quote }}
    {{- end }}
    resources:
      requests:
        storage: {{ $persistence.size }}
{{- end }}

{{/*
A pod's nodeSelector, affinity and tolerations from a component's values, each only when set.
Call with .Values.<component>.
*/}}
{{- define "pdfqueue.scheduling" -}}
{{- range $key := list "nodeSelector" "affinity" "tolerations" }}
{{- with get $ $key }}
{{ $key }}:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A component's topologySpreadConstraints over its own pods, when its topologySpread is enabled,
under a pod spec. Call with the component's $ctx.
*/}}
{{- define "pdfqueue.topologySpread" -}}
{{- $spread := (index .ctx.Values .component).topologySpread }}
{{- if $spread.enabled }}
topologySpreadConstraints:
  - maxSkew: {{ $spread.maxSkew }}
    topologyKey: {{ $spread.topologyKey }}
    whenUnsatisfiable: {{ $spread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "pdfqueue.selectorLabels" . | nindent 8 }}
{{- end }}
{{- end }}

{{/*
The worker's terminationGracePeriodSeconds: the value, or (when 0) jobCompletionWaitSeconds
plus shutdownMarginSeconds. pdfqueue.validateShutdown checks it against the shutdown rule.
*/}}
{{- define "pdfqueue.worker.terminationGracePeriodSeconds" -}}
{{- $w := .Values.worker }}
{{- $grace := int $w.terminationGracePeriodSeconds }}
{{- if eq $grace 0 }}
{{- $grace = add (int (ceil (float64 $w.jobCompletionWaitSeconds))) (int $w.shutdownMarginSeconds) }}
{{- end }}
{{- $grace }}
{{- end }}

{{/* The Service (in this release) that the API's readiness and `helm test` talk to. */}}
{{- define "pdfqueue.api.url" -}}
{{- printf "http://%s:%v" (include "pdfqueue.componentName" (dict "ctx" . "component" "api")) .Values.api.service.port }}
{{- end }}

{{/*
What the bundled PostgreSQL's volume holds under the retention values, for NOTES.txt: the
per-file rows of how many PDFs, and so how many a day the retention lets through, from the
measured bytes per PDF of pdfqueue_files (table and indexes; docs/operations/capacity.md).
Half the volume is left to the WAL, the batch rows, the users table and VACUUM's slack.
*/}}
{{- define "pdfqueue.retention.volumeNote" -}}
{{- $bytesPerPdf := 720.0 }}
{{- $size := .Values.postgresql.persistence.size | toString }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $size | float64 }}
{{- $units := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 }}
{{- $bytes := mulf $number (get $units (regexReplaceAll "^[0-9.]+" $size "")) }}
{{- $pdfs := divf (mulf $bytes 0.5) $bytesPerPdf | floor }}
{{- $r := .Values.retention }}
{{- $days := list ($r.days | int64) }}
{{- range $tenant, $d := $r.tenantDays }}{{ $days = append $days ($d | int64) }}{{ end }}
{{- $forever := or (not $r.enabled) (has (int64 0) $days) }}
{{- $longest := 0 }}
{{- range $days }}{{ if gt (int64 .) (int64 $longest) }}{{ $longest = . }}{{ end }}{{ end }}
{{- $millions := printf "%.1f M" (divf $pdfs 1e6) }}
{{- if $forever }}
WARNING: {{ if not $r.enabled }}retention.enabled is false{{ else }}a retention of 0 days keeps batches for ever{{ end }}: nothing purges
pdfqueue_files, and the bundled PostgreSQL's volume (postgresql.persistence.size={{ $size }}) fills
after the per-file rows of about {{ $millions }} PDFs ({{ $bytesPerPdf | int64 }} bytes each, half the volume kept for the
WAL and the other tables). Enable retention, or size the volume (docs/operations/capacity.md).
{{- else }}
{{- $perDay := divf $pdfs (add1 $longest) | floor }}
Capacity: the bundled PostgreSQL's volume (postgresql.persistence.size={{ $size }}) holds the per-file
rows of about {{ $millions }} PDFs ({{ $bytesPerPdf | int64 }} bytes each, half the volume kept for the WAL and the
other tables); purged daily after {{ $longest }} days, that is about {{ divf $perDay 24 | floor | int64 }} PDFs an hour.
{{- if lt $perDay 24e6 }}
WARNING: at 1 M PDFs an hour, {{ $longest }} days of pdfqueue_files need a volume of about
{{ divf (mulf $bytesPerPdf 24e6 (add1 $longest) 2.0) 1073741824.0 | ceil | int64 }}Gi (docs/operations/capacity.md): raise postgresql.persistence.size, lower
retention.days, or use an external database sized for it.
{{- end }}
{{- end }}
{{- end }}

{{/*
The CA bundles (and Redis client certificate) of tls.*, as a pod's volumes and a container's
volumeMounts, at /etc/pdfqueue/tls/<store>/: empty when no Secret is named. Call with $.
*/}}
{{- define "pdfqueue.tls.volumes" -}}
{{- range $store := list "redis" "postgresql" "s3" }}
{{- with index $.Values.tls $store }}
{{- if .caSecret }}
- name: tls-{{ $store }}
  secret:
    secretName: {{ .caSecret }}
    items:
      - key: {{ .caKey }}
        path: ca.crt
    defaultMode: 0444
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.tls.redis.clientSecret }}
- name: tls-redis-client
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "pdfqueue.tls.mounts" -}}
{{- range $store := list "redis" "postgresql" "s3" }}
{{- if (index $.Values.tls $store).caSecret }}
- name: tls-{{ $store }}
  mountPath: /etc/pdfqueue/tls/{{ $store }}
  readOnly: true
{{- end }}
{{- end }}
{{- if .Values.tls.redis.clientSecret }}
- name: tls-redis-client
  mountPath: /etc/pdfqueue/tls/redis-client
  readOnly: true
{{- end }}
{{- end }}
