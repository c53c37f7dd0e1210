{{/* Names and labels. */}}
{{- define "waitline.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "waitline.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: include "waitline.selector" (list . "dispatcher") */}}
{{- define "waitline.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "waitline.podImage" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "waitline.reconcileImage" -}}
{{- $tag := .Values.reconcileImage.tag | default .Chart.AppVersion -}}
{{- printf "%s:%s" .Values.reconcileImage.repository $tag -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds of the dispatcher: its drain grace, then the consumer's and the
producer's close (each bounded by the close bound), then the final commit and exit.
*/}}
{{- define "waitline.terminationGrace" -}}
{{- $d := .Values.dispatcher -}}
{{- add (int $d.drainGraceSeconds) (mul 2 (int $d.closeBoundSeconds)) (int $d.shutdownMarginSeconds) -}}
{{- end -}}

{{/* The pod-level and container-level security settings every Waitline container runs with. */}}
{{- define "waitline.podSecurity" -}}
runAsNonRoot: true
runAsUser: {{ .Values.runAsUser }}
runAsGroup: {{ .Values.runAsUser }}
fsGroup: {{ .Values.runAsUser }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "waitline.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* The Secret holding Kafka's SASL password: the user's, else the chart's (when it has one). */}}
{{- define "waitline.kafkaSecret" -}}
{{- .Values.kafka.existingSecret | default (printf "%s-kafka" (include "waitline.fullname" .)) -}}
{{- end -}}

{{/* How the pod, the console and the reconciliation job (its Spark source and sink too) reach
Kafka: WAITLINE_BOOTSTRAP_SERVERS and its security (KafkaClientSettings in
dispatcher/kafka/config.py), the one configuration every client reads. */}}
{{- define "waitline.kafkaEnv" -}}
- name: WAITLINE_BOOTSTRAP_SERVERS
  value: {{ required "kafka.bootstrapServers is required" .Values.kafka.bootstrapServers | quote }}
- name: WAITLINE_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
{{- with .Values.kafka.saslMechanism }}
- name: WAITLINE_SASL_MECHANISM
  value: {{ . | quote }}
{{- end }}
{{- include "waitline.saslEnv" . }}
{{- end -}}

{{- define "waitline.saslEnv" -}}
{{- with .Values.kafka.saslUsername }}
- name: WAITLINE_SASL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- if or .Values.kafka.existingSecret .Values.kafka.saslPassword }}
- name: WAITLINE_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "waitline.kafkaSecret" . }}
      key: sasl-password
{{- end }}
{{- end -}}

{{- define "waitline.pgSecret" -}}
{{- .Values.reconcile.existingSecret | default (printf "%s-registry" (include "waitline.fullname" .)) -}}
{{- end -}}

{{- define "waitline.pgEnv" -}}
{{- if not (or .Values.reconcile.existingSecret .Values.reconcile.pgDsn) -}}
{{- fail "reconcile.pgDsn or reconcile.existingSecret (key pg-dsn) is required: the registry's PostgreSQL DSN" -}}
{{- end -}}
- name: WAITLINE_PG_DSN
  valueFrom:
    secretKeyRef:
      name: {{ include "waitline.pgSecret" . }}
      key: pg-dsn
{{- end -}}

{{/* The reconciliation job's pod: include "waitline.reconcilePod" (list . ARGS RESOURCES) */}}
{{- define "waitline.reconcilePod" -}}
{{- $root := index . 0 -}}
{{- $args := index . 1 -}}
{{- $resources := index . 2 -}}
{{- $r := $root.Values.reconcile -}}
automountServiceAccountToken: false
securityContext:
  {{- include "waitline.podSecurity" $root | nindent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: reconcile
    image: {{ include "waitline.reconcileImage" $root | quote }}
    imagePullPolicy: {{ $root.Values.reconcileImage.pullPolicy }}
    args:
      {{- toYaml (concat $args $r.extraArgs) | nindent 6 }}
    ports:
      - name: metrics
        containerPort: {{ $r.metricsPort }}
        protocol: TCP
      - name: spark-driver
        containerPort: 7078
        protocol: TCP
      - name: spark-blocks
        containerPort: 7079
        protocol: TCP
    env:
      {{- include "waitline.kafkaEnv" $root | nindent 6 }}
      {{- include "waitline.pgEnv" $root | nindent 6 }}
      - name: WAITLINE_STATE_DIR
        value: /var/lib/waitline
      - name: WAITLINE_RECONCILE_METRICS_HOST
        value: "0.0.0.0"
      # Client mode: the executors connect back to the driver at this pod's IP (a pod's host
      # name resolves nowhere else), on fixed ports a NetworkPolicy can allow. PySpark passes
      # PYSPARK_SUBMIT_ARGS to the JVM it starts.
      - name: POD_IP
        valueFrom:
          fieldRef:
            fieldPath: status.podIP
      - name: PYSPARK_SUBMIT_ARGS
        value: >-
          --conf spark.driver.host=$(POD_IP) --conf spark.driver.port=7078
          --conf spark.driver.blockManager.port=7079 pyspark-shell
    resources:
      {{- toYaml $resources | nindent 6 }}
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop: [ALL]
    volumeMounts:
      - name: state
        mountPath: /var/lib/waitline
      - name: tmp
        mountPath: /tmp
volumes:
  - name: tmp
    emptyDir: {}
  - name: state
    {{- if $r.checkpoint }}
    emptyDir: {}
    {{- else }}
    persistentVolumeClaim:
      claimName: {{ include "waitline.fullname" $root }}-reconcile-state
    {{- end }}
{{- end }}
