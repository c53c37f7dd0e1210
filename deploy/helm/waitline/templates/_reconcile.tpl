{{/* The reconciliation job's pod (the long-running driver's and the CronJob's). */}}

{{/* The master the job's --master flag names (reconcile.master: k8s is this cluster). */}}
{{- define "waitline.sparkMaster" -}}
{{- $master := .Values.reconcile.master -}}
{{- if eq $master "k8s" -}}k8s://https://kubernetes.default.svc:443{{- else -}}{{ $master }}{{- end -}}
{{- end -}}

{{- define "waitline.sparkOnKubernetes" -}}
{{- if eq .Values.reconcile.master "k8s" }}true{{ end -}}
{{- end -}}

{{/* Where the driver's Spark configuration (spark-defaults.conf, the executor pod template) is
mounted, with master k8s. */}}
{{- define "waitline.sparkConfDir" -}}/opt/waitline/spark-conf{{- end -}}

{{/* The headless Service through which the executors reach the driver (master k8s). */}}
{{- define "waitline.driverService" -}}
{{- include "waitline.name" (list . "reconcile-driver" 63) -}}
{{- end -}}

{{/* Every variable of the job's container (its extraEnv aside). */}}
{{- define "waitline.reconcileEnv" -}}
{{- include "waitline.kafkaEnv" . }}
{{ include "waitline.pgEnv" . }}
- name: WAITLINE_STATE_DIR
  value: /var/lib/waitline
- name: WAITLINE_RECONCILE_METRICS_HOST
  value: "0.0.0.0"
{{- if include "waitline.sparkOnKubernetes" . }}
# Client mode on Kubernetes: the executors reach the driver through its headless Service, and
# name this pod as their owner (they go when it goes). The rest of Spark's configuration is in
# spark-defaults.conf, mounted from the chart's ConfigMap.
- name: SPARK_CONF_DIR
  value: {{ include "waitline.sparkConfDir" . }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: PYSPARK_SUBMIT_ARGS
  value: --conf spark.kubernetes.driver.pod.name=$(POD_NAME) pyspark-shell
{{- else }}
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
    --conf spark.driver.blockManager.port=7079
    --conf spark.sql.warehouse.dir=/tmp/spark-warehouse pyspark-shell
{{- end }}
{{- end -}}

{{/* include "waitline.reconcilePod" (list . ARGS RESOURCES) */}}
{{- define "waitline.reconcilePod" -}}
{{- $root := index . 0 -}}
{{- $args := index . 1 -}}
{{- $resources := index . 2 -}}
{{- $r := $root.Values.reconcile -}}
{{- $env := include "waitline.reconcileEnv" $root -}}
{{- $k8s := include "waitline.sparkOnKubernetes" $root -}}
serviceAccountName: {{ include "waitline.serviceAccount" (list $root "reconcile" $r) }}
{{- if $k8s }}
# The driver asks the API server for its executor pods, as this ServiceAccount.
automountServiceAccountToken: true
{{- else }}
automountServiceAccountToken: false
{{- end }}
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
      {{- $env | nindent 6 }}
      {{- with (include "waitline.extraEnv" (list $root $r "reconcile" $env) | trim) }}{{ . | nindent 6 }}{{ end }}
    {{- with $r.envFrom }}
    envFrom:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    resources:
      {{- toYaml $resources | nindent 6 }}
    securityContext:
      {{- include "waitline.containerSecurity" $root | nindent 6 }}
    volumeMounts:
      - name: state
        mountPath: /var/lib/waitline
      - name: tmp
        mountPath: /tmp
      {{- if $k8s }}
      - name: spark-conf
        mountPath: {{ include "waitline.sparkConfDir" $root }}
        readOnly: true
      {{- end }}
      {{- with (include "waitline.kafkaVolumeMounts" $root | trim) }}{{ . | nindent 6 }}{{ end }}
      {{- with $r.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
volumes:
  - name: tmp
    emptyDir: {}
  {{- if $k8s }}
  - name: spark-conf
    configMap:
      name: {{ include "waitline.name" (list $root "spark-conf" 63) }}
  {{- end }}
  - name: state
    {{- if $r.checkpoint }}
    emptyDir: {}
    {{- else }}
    persistentVolumeClaim:
      claimName: {{ include "waitline.name" (list $root "reconcile-state" 63) }}
    {{- end }}
  {{- with (include "waitline.kafkaVolumes" $root | trim) }}{{ . | nindent 2 }}{{ end }}
  {{- with $r.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $r.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $r.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $r.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The pod template's annotations: the checksum of what it reads, the scrape annotations. */}}
{{- define "waitline.reconcileAnnotations" -}}
{{- $r := .Values.reconcile -}}
checksum/config: {{ include "waitline.checksum" (list . (list .Values.kafka .Values.registry $r.master $r.executors .Values.reconcileImage) (list .Values.kafka.sasl.existingSecret .Values.kafka.tls.ca.existingSecret .Values.kafka.tls.client.existingSecret .Values.registry.existingSecret)) }}
{{- if .Values.metrics.scrapeAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ $r.metricsPort | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with $r.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}
