{{/* The release's resource name: the release name, or release-chart when they differ. */}}
{{- define "kps.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select this release's pods; never change them after an install. */}}
{{- define "kps.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kps.labels" -}}
{{ include "kps.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kps.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "kps.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kps.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The sink's own process: non-root (the image's uid), nothing written outside /tmp. */}}
{{- define "kps.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Environment from Secrets, for `${NAME}` in the configuration. */}}
{{- define "kps.secretEnv" -}}
{{- range .Values.secretEnv }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key }}
{{- end }}
{{- end -}}

{{/* A Kubernetes memory quantity ("512Mi", "1Gi", "2G", "1.5Gi", "536870912") in bytes. */}}
{{- define "kps.bytes" -}}
{{- $q := toString . | trim -}}
{{- $parts := regexFindAll "^([0-9]+(\\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$" $q 1 -}}
{{- if not $parts -}}
{{- fail (printf "memory quantity %q: use a number with Ki, Mi, Gi, Ti, k, M, G, T or no suffix" $q) -}}
{{- end -}}
{{- $number := regexReplaceAll "(Ki|Mi|Gi|Ti|k|M|G|T)$" $q "" -}}
{{- $suffix := trimPrefix $number $q -}}
{{- $unit := get (dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776) $suffix -}}
{{- mulf (float64 $number) (float64 $unit) | floor | int64 -}}
{{- end -}}

{{/*
The sink's `[kafka] memory_budget` from the pod's memory limit, as KAFKA_PG_SINK_KAFKA__MEMORY_BUDGET
(whole MiB): the limit minus the headroom (`memoryBudget.headroom` when set, else
`memoryBudget.headroomPercent` of the limit), so what the budget does not cover (PostgreSQL
results, batches in flight, the program itself) fits under the limit too. Nothing without a
memory limit or with `memoryBudget.fromLimit: false`: the configuration's own setting holds.
*/}}
{{- define "kps.memoryBudgetEnv" -}}
{{- $limit := dig "limits" "memory" "" .Values.resources -}}
{{- if and .Values.memoryBudget.fromLimit $limit -}}
{{- $bytes := include "kps.bytes" $limit | int64 -}}
{{- $headroom := 0 -}}
{{- if .Values.memoryBudget.headroom -}}
{{- $headroom = include "kps.bytes" .Values.memoryBudget.headroom | int64 -}}
{{- else -}}
{{- $percent := .Values.memoryBudget.headroomPercent | int64 -}}
{{- if or (lt $percent 0) (ge $percent 100) -}}
{{- fail (printf "memoryBudget.headroomPercent (%d) must be from 0 to 99" $percent) -}}
{{- end -}}
{{- $headroom = div (mul $bytes $percent) 100 -}}
{{- end -}}
{{- $budget := div (sub $bytes $headroom) 1048576 -}}
{{- if lt $budget 1 -}}
{{- fail (printf "memoryBudget: the headroom (%d bytes) leaves no budget under resources.limits.memory (%s)" $headroom $limit) -}}
{{- end -}}
- name: KAFKA_PG_SINK_KAFKA__MEMORY_BUDGET
  value: "{{ $budget }}MiB"
{{- end -}}
{{- end -}}
