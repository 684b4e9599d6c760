{{/*
The operator's RBAC rules, shared by its Role (watching the release namespace) and its
ClusterRole (operator.clusterWide). The same rules as k8s/rbac/operator.yaml and
k8s/rbac/operator-peering.yaml, the operator's own manifests; tests/test_chart.py compares them.
*/}}

{{/* framework: what kopf itself needs in every namespace it serves. */}}
{{- define "pdfqueue.operator.frameworkNamespacedRules" -}}
# framework: kopf posts handler failures as Events; the autoscaler posts its decisions.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if .Values.operator.peering }}
# framework: kopf announces itself and watches its peers in the peering object.
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
{{- end }}
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
{{- if and .Values.operator.peering .Values.operator.clusterWide }}
# framework: cluster-wide kopf peering.
- apiGroups: [kopf.dev]
  resources: [clusterkopfpeerings]
  verbs: [get, list, watch, patch]
{{- end }}
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
