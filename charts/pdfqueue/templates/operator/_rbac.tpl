{{/*
The operator's RBAC rules, shared by its Role (watching the release namespace) and its
ClusterRole (operator.clusterWide), and its leader election's Role (always namespaced). The
same rules as k8s/rbac/operator.yaml, the operator's own manifests; tests/test_chart.py
compares them.
*/}}

{{/* framework: what kopf itself needs in every namespace it serves. */}}
{{- define "pdfqueue.operator.frameworkNamespacedRules" -}}
# framework: kopf posts handler failures as Events; the autoscaler posts its decisions.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* framework: what kopf needs at cluster scope, whatever it watches. */}}
{{- define "pdfqueue.operator.frameworkClusterRules" -}}
# framework: kopf discovers the resources it serves (and notices CRDs coming and going).
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
# framework: with --namespace, kopf follows which of those namespaces exist (without this it
# retries for a minute at start, then falls back with a warning).
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end }}

{{/* application: pdfqueue's own reconciliation and worker autoscaling. */}}
{{- define "pdfqueue.operator.applicationRules" -}}
# application: watch PdfBatches; kopf keeps its handler progress in their annotations
# (patch), and the status loop reads an object before writing its status (get).
- apiGroups: [pdfqueue.io]
  resources: [pdfbatches]
  verbs: [get, list, watch, patch]
# application: progress, phase and conditions go into the status subresource only.
- apiGroups: [pdfqueue.io]
  resources: [pdfbatches/status]
  verbs: [patch]
# application: find the worker Deployments (watched with the worker label selector).
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list, watch]
# application: set their replicas through the scale subresource, never their spec.
- apiGroups: [apps]
  resources: [deployments/scale]
  verbs: [get, patch]
# application: refuse to scale a Deployment that an HPA also scales.
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [list, watch]
# application: before scaling in, mark busy worker pods with a higher pod-deletion-cost.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, patch]
{{- end }}

{{/* application: pdfqueue's own leader election (not kopf's peering), in the release namespace. */}}
{{- define "pdfqueue.operator.leaderElectionRules" -}}
# application: the first replica creates the Lease (a create cannot name its object).
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
# application: the replicas read, take, renew and release this one Lease, and no other.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ include "pdfqueue.componentName" (dict "ctx" . "component" "operator") }}]
  verbs: [get, update, patch]
{{- end }}
