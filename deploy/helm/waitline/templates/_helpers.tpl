{{/* Names and labels. */}}
{{- define "waitline.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The name of one object: include "waitline.name" (list . "dispatcher" 63). The fullname and the
suffix, within the limit Kubernetes sets for the kind (63: a DNS label, which a Service's name
must be, and a label value; 52: a CronJob's, whose Jobs add 11 characters). A fullname too long
for it is cut and marked with a hash of the whole, so that two long release names never render
the same object name.
*/}}
{{- define "waitline.name" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- $limit := int (index . 2) -}}
{{- $full := include "waitline.fullname" $root -}}
{{- $name := printf "%s-%s" $full $suffix -}}
{{- if gt (len $name) $limit -}}
{{- $keep := int (sub $limit (add (len $suffix) 8)) -}}
{{- $name = printf "%s-%s-%s" ($full | trunc $keep | trimSuffix "-") (sha256sum $full | trunc 6) $suffix -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- define "waitline.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The labels of one component's objects: include "waitline.componentLabels" (list . "dispatcher") */}}
{{- define "waitline.componentLabels" -}}
{{ include "waitline.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
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
Seconds in a duration as the pod reads one (dispatcher/durations.py: 250ms, 60s, 5m, 1h, 7d, or
bare seconds), rounded up: include "waitline.seconds" (list VALUE NAME-FOR-ERRORS)
*/}}
{{- define "waitline.seconds" -}}
{{- $text := index . 0 | toString | trim -}}
{{- $pattern := "^([0-9]+(\\.[0-9]+)?)\\s*(ms|s|m|h|d)?$" -}}
{{- if not (regexMatch $pattern $text) -}}
{{- fail (printf "%s: %q is not a duration (a number with a unit ms, s, m, h or d, e.g. 60s or 1h)" (index . 1) $text) -}}
{{- end -}}
{{- $number := regexReplaceAll $pattern $text "${1}" | float64 -}}
{{- $unit := regexReplaceAll $pattern $text "${3}" | default "s" -}}
{{- $scale := get (dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 "d" 86400.0) $unit -}}
{{- mulf $number $scale | ceil | int -}}
{{- end -}}

{{/*
The dispatcher's drain grace in seconds. Calls in flight at SIGTERM may run until their
deadline, then write their outcome and tombstone: the grace defaults to the deadline plus
dispatcher.drainAfterDeadlineSeconds, and a grace given shorter than the deadline is refused
(those calls would be cancelled and reach the DLQ only when their wait expires).
*/}}
{{- define "waitline.drainGrace" -}}
{{- $d := .Values.dispatcher -}}
{{- /* The pod's own default deadline (DispatchSettings.deadline; the chart's tests hold them equal). */ -}}
{{- $deadline := int (include "waitline.seconds" (list (index $d.settings "deadline" | default "60s") "dispatcher.settings.deadline")) -}}
{{- if kindIs "invalid" $d.drainGraceSeconds -}}
{{- add $deadline $d.drainAfterDeadlineSeconds -}}
{{- else -}}
{{- if lt (int $d.drainGraceSeconds) $deadline -}}
{{- fail (printf "dispatcher.drainGraceSeconds %d is shorter than dispatcher.settings.deadline (%d s): calls in flight at a roll would be cancelled and reach the DLQ only when their wait expires. Raise dispatcher.drainGraceSeconds to at least %d, or remove it (it then follows the deadline: %d s, with room for the outcome writes), or lower the deadline" (int $d.drainGraceSeconds) $deadline $deadline (add $deadline $d.drainAfterDeadlineSeconds)) -}}
{{- end -}}
{{- int $d.drainGraceSeconds -}}
{{- end -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds of the dispatcher: its drain grace, then the consumer's and the
producer's close (each bounded by the close bound), then the final commit and exit.
*/}}
{{- define "waitline.terminationGrace" -}}
{{- $d := .Values.dispatcher -}}
{{- add (include "waitline.drainGrace" . | int) (mul 2 (int $d.closeBoundSeconds)) (int $d.shutdownMarginSeconds) -}}
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

{{/* --- Kafka: one configuration for every container and for KEDA ------------------------- */}}

{{/* Whether the listener speaks TLS, SASL (from kafka.securityProtocol). */}}
{{- define "waitline.kafkaTls" -}}
{{- if has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL") }}true{{ end -}}
{{- end -}}
{{- define "waitline.kafkaSasl" -}}
{{- if has .Values.kafka.securityProtocol (list "SASL_PLAINTEXT" "SASL_SSL") }}true{{ end -}}
{{- end -}}

{{/* The Secret holding Kafka's SASL password: the user's, else the chart's. */}}
{{- define "waitline.kafkaSecret" -}}
{{- .Values.kafka.sasl.existingSecret | default (include "waitline.name" (list . "kafka" 63)) -}}
{{- end -}}

{{/* Where the Kafka CA and client certificate are mounted (the same path in every container). */}}
{{- define "waitline.kafkaCaDir" -}}/etc/waitline/kafka/ca{{- end -}}
{{- define "waitline.kafkaClientDir" -}}/etc/waitline/kafka/client{{- end -}}

{{/*
Refuses Kafka values that contradict each other, with the value to change: what the protocol
would ignore (SASL without SASL_*, certificates without TLS), SASL without its mechanism, user
or password, a client certificate without its key.
*/}}
{{- define "waitline.kafkaChecks" -}}
{{- $k := .Values.kafka -}}
{{- $s := $k.sasl -}}
{{- $tls := $k.tls -}}
{{- if include "waitline.kafkaSasl" . -}}
{{- if not $s.mechanism }}{{ fail (printf "kafka.sasl.mechanism is required with kafka.securityProtocol %s (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)" $k.securityProtocol) }}{{ end -}}
{{- if not $s.username }}{{ fail (printf "kafka.sasl.username is required with kafka.securityProtocol %s" $k.securityProtocol) }}{{ end -}}
{{- if not (or $s.password $s.existingSecret) }}{{ fail (printf "kafka.sasl.existingSecret (a Secret with the key %s) or kafka.sasl.password is required with kafka.securityProtocol %s" $s.passwordKey $k.securityProtocol) }}{{ end -}}
{{- else if or $s.mechanism $s.username $s.password $s.existingSecret -}}
{{- fail (printf "kafka.sasl.* is set but kafka.securityProtocol %s uses no SASL: set kafka.securityProtocol to SASL_SSL (or SASL_PLAINTEXT), or clear kafka.sasl" $k.securityProtocol) -}}
{{- end -}}
{{- if not (include "waitline.kafkaTls" .) -}}
{{- if or $tls.ca.existingSecret $tls.client.existingSecret (not $tls.checkHostname) }}{{ fail (printf "kafka.tls.* is set but kafka.securityProtocol %s uses no TLS: set kafka.securityProtocol to SSL or SASL_SSL, or clear kafka.tls" $k.securityProtocol) }}{{ end -}}
{{- end -}}
{{- if $tls.client.existingSecret -}}
{{- if not (and $tls.client.certKey $tls.client.keyKey) }}{{ fail "kafka.tls.client.certKey and kafka.tls.client.keyKey: a client certificate needs both (the keys of kafka.tls.client.existingSecret)" }}{{ end -}}
{{- else if $tls.client.keyPasswordKey -}}
{{- fail "kafka.tls.client.keyPasswordKey is set but there is no client key: set kafka.tls.client.existingSecret, or clear keyPasswordKey" -}}
{{- end -}}
{{- end -}}

{{/*
How every container reaches Kafka: the WAITLINE_* variables of KafkaClientSettings
(dispatcher/kafka/config.py), which the pod, the reconciliation job (its admin client and
Spark's Kafka source and sink), the console and the DLQ tools all read. The password is a
secretKeyRef; the CA and the client certificate are files of the mounted Secrets.
*/}}
{{- define "waitline.kafkaEnv" -}}
{{- include "waitline.kafkaChecks" . -}}
{{- $k := .Values.kafka -}}
- name: WAITLINE_BOOTSTRAP_SERVERS
  value: {{ required "kafka.bootstrapServers is required" $k.bootstrapServers | quote }}
- name: WAITLINE_SECURITY_PROTOCOL
  value: {{ $k.securityProtocol | quote }}
{{- if include "waitline.kafkaSasl" . }}
- name: WAITLINE_SASL_MECHANISM
  value: {{ $k.sasl.mechanism | quote }}
- name: WAITLINE_SASL_USERNAME
  value: {{ $k.sasl.username | quote }}
- name: WAITLINE_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "waitline.kafkaSecret" . }}
      key: {{ $k.sasl.passwordKey }}
{{- end }}
{{- if include "waitline.kafkaTls" . }}
{{- with $k.tls.ca.existingSecret }}
- name: WAITLINE_SSL_CAFILE
  value: {{ printf "%s/%s" (include "waitline.kafkaCaDir" $) $k.tls.ca.key | quote }}
{{- end }}
{{- with $k.tls.client.existingSecret }}
- name: WAITLINE_SSL_CERTFILE
  value: {{ printf "%s/%s" (include "waitline.kafkaClientDir" $) $k.tls.client.certKey | quote }}
- name: WAITLINE_SSL_KEYFILE
  value: {{ printf "%s/%s" (include "waitline.kafkaClientDir" $) $k.tls.client.keyKey | quote }}
{{- with $k.tls.client.keyPasswordKey }}
- name: WAITLINE_SSL_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $k.tls.client.existingSecret }}
      key: {{ . }}
{{- end }}
{{- end }}
{{- if not $k.tls.checkHostname }}
- name: WAITLINE_SSL_CHECK_HOSTNAME
  value: "false"
{{- end }}
{{- end }}
{{- end -}}

{{/* The Secrets kafka.tls names, mounted read-only where "waitline.kafkaEnv" points. */}}
{{- define "waitline.kafkaVolumeMounts" -}}
{{- if include "waitline.kafkaTls" . }}
{{- if .Values.kafka.tls.ca.existingSecret }}
- name: kafka-ca
  mountPath: {{ include "waitline.kafkaCaDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.kafka.tls.client.existingSecret }}
- name: kafka-client-cert
  mountPath: {{ include "waitline.kafkaClientDir" . }}
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{- define "waitline.kafkaVolumes" -}}
{{- $tls := .Values.kafka.tls -}}
{{- if include "waitline.kafkaTls" . }}
{{- with $tls.ca.existingSecret }}
- name: kafka-ca
  secret:
    secretName: {{ . }}
    items:
      - key: {{ $tls.ca.key }}
        path: {{ $tls.ca.key }}
{{- end }}
{{- with $tls.client.existingSecret }}
- name: kafka-client-cert
  secret:
    secretName: {{ . }}
    # Readable by the pods' group (fsGroup) only: the key is a secret.
    defaultMode: 288  # 0440
    items:
      - key: {{ $tls.client.certKey }}
        path: {{ $tls.client.certKey }}
      - key: {{ $tls.client.keyKey }}
        path: {{ $tls.client.keyKey }}
{{- end }}
{{- end }}
{{- end -}}

{{/* --- the registry (PostgreSQL) ------------------------------------------------------------ */}}

{{- define "waitline.registrySecret" -}}
{{- .Values.registry.existingSecret | default (include "waitline.name" (list . "registry" 63)) -}}
{{- end -}}

{{- define "waitline.pgEnv" -}}
{{- if not (or .Values.registry.existingSecret .Values.registry.dsn) -}}
{{- fail (printf "registry.existingSecret (a Secret with the key %s) or registry.dsn is required: the registry's PostgreSQL DSN" .Values.registry.dsnKey) -}}
{{- end -}}
- name: WAITLINE_PG_DSN
  valueFrom:
    secretKeyRef:
      name: {{ include "waitline.registrySecret" . }}
      key: {{ .Values.registry.dsnKey }}
{{- end -}}

{{/* --- tracing ------------------------------------------------------------------------------ */}}

{{/* The standard OTEL_* variables, for the pod and the console (its redrives make spans). */}}
{{- define "waitline.tracingEnv" -}}
{{- with .Values.tracing }}
{{- if .endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ .serviceName | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampler | quote }}
{{- with .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* --- what every workload takes from its values: extraEnv, envFrom, extra volumes ----------- */}}

{{/*
The user's own variables after the chart's: include "waitline.extraEnv" (list . COMPONENT-VALUES
"dispatcher" CHART-ENV). A variable the chart already sets is refused (Kubernetes would keep one
of the two silently).
*/}}
{{- define "waitline.extraEnv" -}}
{{- $values := index . 1 -}}
{{- $component := index . 2 -}}
{{- $chartEnv := index . 3 | fromYamlArray -}}
{{- $owned := list -}}
{{- range $chartEnv }}{{ $owned = append $owned .name }}{{ end -}}
{{- range $values.extraEnv }}
{{- if has .name $owned }}
{{- fail (printf "%s.extraEnv: %s is set by the chart from its own values; change that value instead" $component .name) }}
{{- end }}
{{- end }}
{{- with $values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
A checksum of what a workload's pods read from ConfigMaps and Secrets: the values the chart
renders them from and, for a Secret of the user's (existingSecret), its resourceVersion when the
chart is installed or upgraded (lookup; empty under `helm template`). A changed value, or a
Secret rotated before `helm upgrade`, rolls the pods.
include "waitline.checksum" (list . (list THINGS...) (list SECRET-NAMES...))
*/}}
{{- define "waitline.checksum" -}}
{{- $root := index . 0 -}}
{{- $versions := list -}}
{{- range $name := index . 2 -}}
{{- if $name -}}
{{- $versions = append $versions (dig "metadata" "resourceVersion" "" (lookup "v1" "Secret" $root.Release.Namespace $name)) -}}
{{- end -}}
{{- end -}}
{{- list (index . 1) $versions | toJson | sha256sum -}}
{{- end -}}

{{/* --- the dispatcher's environment ---------------------------------------------------------- */}}

{{/*
The built-in HTTP handler's credentials: (variable, Secret key) pairs. From the chart's own
Secret (the values given) or from dispatcher.httpCredentials.existingSecret under the keys named;
each a required key, so that a wrong key name stops the pod at start instead of running it
unauthenticated.
*/}}
{{- define "waitline.httpCredentialKeys" -}}
{{- $c := .Values.dispatcher.httpCredentials -}}
{{- $keys := dict -}}
{{- if $c.existingSecret -}}
{{- if or $c.bearerToken $c.basicUsername $c.basicPassword -}}
{{- fail "dispatcher.httpCredentials: give existingSecret (and the names of its keys) or the credentials themselves, not both" -}}
{{- end -}}
{{- if not (or $c.bearerTokenKey $c.basicUsernameKey) -}}
{{- fail (printf "dispatcher.httpCredentials.existingSecret %s: name the key that holds the credential (bearerTokenKey, or basicUsernameKey and basicPasswordKey)" $c.existingSecret) -}}
{{- end -}}
{{- with $c.bearerTokenKey }}{{ $_ := set $keys "WAITLINE_HTTP_BEARER_TOKEN" . }}{{ end -}}
{{- with $c.basicUsernameKey }}{{ $_ := set $keys "WAITLINE_HTTP_BASIC_USERNAME" . }}{{ end -}}
{{- with $c.basicPasswordKey }}{{ $_ := set $keys "WAITLINE_HTTP_BASIC_PASSWORD" . }}{{ end -}}
{{- else -}}
{{- if $c.bearerToken }}{{ $_ := set $keys "WAITLINE_HTTP_BEARER_TOKEN" "bearer-token" }}{{ end -}}
{{- if $c.basicUsername }}{{ $_ := set $keys "WAITLINE_HTTP_BASIC_USERNAME" "basic-username" }}{{ end -}}
{{- if $c.basicPassword }}{{ $_ := set $keys "WAITLINE_HTTP_BASIC_PASSWORD" "basic-password" }}{{ end -}}
{{- end -}}
{{- if ne (hasKey $keys "WAITLINE_HTTP_BASIC_USERNAME") (hasKey $keys "WAITLINE_HTTP_BASIC_PASSWORD") -}}
{{- fail "dispatcher.httpCredentials: basic authentication needs both a username and a password" -}}
{{- end -}}
{{- toJson $keys -}}
{{- end -}}

{{- define "waitline.httpSecret" -}}
{{- .Values.dispatcher.httpCredentials.existingSecret | default (include "waitline.name" (list . "http" 63)) -}}
{{- end -}}

{{/* Every variable of the dispatcher container (its extraEnv aside). */}}
{{- define "waitline.dispatcherEnv" -}}
{{- $d := .Values.dispatcher -}}
{{- include "waitline.kafkaEnv" . }}
- name: WAITLINE_DRAIN_GRACE
  value: {{ printf "%ss" (include "waitline.drainGrace" .) | quote }}
- name: WAITLINE_METRICS_HOST
  value: "0.0.0.0"
- name: WAITLINE_METRICS_PORT
  value: {{ $d.metricsPort | quote }}
{{- with $d.handler }}
- name: WAITLINE_HANDLER
  value: {{ . | quote }}
{{- end }}
{{- with $d.counterpartyUrl }}
- name: WAITLINE_COUNTERPARTY_URL
  value: {{ . | quote }}
{{- end }}
{{- range $name, $value := $d.settings }}
- name: {{ printf "WAITLINE_%s" ($name | upper | replace "-" "_") }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- range $name, $value := $d.http }}
- name: {{ printf "WAITLINE_HTTP_%s" ($name | upper | replace "-" "_") }}
  value: {{ if kindIs "map" $value }}{{ toJson $value | quote }}{{ else if kindIs "slice" $value }}{{ join "," $value | quote }}{{ else }}{{ $value | toString | quote }}{{ end }}
{{- end }}
{{- $secret := include "waitline.httpSecret" . -}}
{{- range $var, $key := include "waitline.httpCredentialKeys" . | fromJson }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
{{- end }}
{{- include "waitline.tracingEnv" . }}
{{- if $d.handlerModules }}
- name: PYTHONPATH
  value: /opt/waitline/handlers
{{- end }}
{{- end -}}

{{/* Where the console's TLS certificate and key are mounted. */}}
{{- define "waitline.consoleTlsDir" -}}/etc/waitline/console-tls{{- end -}}

{{/* Every variable of the console's container (its extraEnv aside). */}}
{{- define "waitline.consoleEnv" -}}
{{- $c := .Values.console -}}
{{- $service := include "waitline.name" (list . "console" 63) -}}
{{- $ns := .Release.Namespace -}}
{{- include "waitline.kafkaEnv" . }}
{{ include "waitline.pgEnv" . }}
# Who may use it (viewers, operators): never in a flag, never in clear here.
- name: WAITLINE_CONSOLE_CREDENTIALS
  valueFrom:
    secretKeyRef:
      name: {{ $c.existingSecret }}
      key: {{ $c.credentialsKey }}
{{- with $c.tls.existingSecret }}
- name: WAITLINE_CONSOLE_TLS_CERT
  value: {{ printf "%s/%s" (include "waitline.consoleTlsDir" $) $c.tls.certKey | quote }}
- name: WAITLINE_CONSOLE_TLS_KEY
  value: {{ printf "%s/%s" (include "waitline.consoleTlsDir" $) $c.tls.keyKey | quote }}
{{- with $c.tls.keyPasswordKey }}
- name: WAITLINE_CONSOLE_TLS_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $c.tls.existingSecret }}
      key: {{ . }}
{{- end }}
{{- end }}
{{- with $c.trustedProxies }}
- name: WAITLINE_CONSOLE_TRUSTED_PROXIES
  value: {{ join "," . | quote }}
{{- end }}
{{- if $c.insecureHttp }}
- name: WAITLINE_CONSOLE_INSECURE_HTTP
  value: "true"
{{- end }}
# The names a request's Host may carry: the Service's, and the ones browsers use.
- name: WAITLINE_CONSOLE_ALLOWED_HOSTS
  value: {{ join "," (concat (list $service (printf "%s.%s" $service $ns) (printf "%s.%s.svc" $service $ns) (printf "%s.%s.svc.cluster.local" $service $ns)) $c.allowedHosts) | quote }}
{{- if .Values.dispatcher.enabled }}
# The pods view asks each dispatcher pod's /status, at every address of the pods' headless
# Service (dispatcher-extras.yaml).
- name: WAITLINE_CONSOLE_POD_STATUS_DNS
  value: {{ printf "%s.%s.svc:%v" (include "waitline.name" (list . "dispatcher-metrics" 63)) $ns .Values.dispatcher.metricsPort | quote }}
{{- end }}
{{- range $name, $value := $c.settings }}
- name: {{ printf "WAITLINE_CONSOLE_%s" ($name | upper | replace "-" "_") }}
  value: {{ if kindIs "map" $value }}{{ toJson $value | quote }}{{ else if kindIs "slice" $value }}{{ join "," $value | quote }}{{ else }}{{ $value | toString | quote }}{{ end }}
{{- end }}
{{- include "waitline.tracingEnv" . }}
{{- end -}}

{{/* The ServiceAccount a workload's pods run as: include "waitline.serviceAccount" (list . "dispatcher" VALUES) */}}
{{- define "waitline.serviceAccount" -}}
{{- $sa := (index . 2).serviceAccount -}}
{{- if $sa.create -}}
{{- $sa.name | default (include "waitline.name" (list (index . 0) (index . 1) 63)) -}}
{{- else -}}
{{- $sa.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* One egress rule from networkPolicy values: include "waitline.egress" (list {ports, to} [UDP too]) */}}
{{- define "waitline.egress" -}}
{{- $rule := index . 0 -}}
{{- $udp := gt (len .) 1 -}}
- {{- with $rule.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    {{- range $rule.ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- if $udp }}
    - {port: {{ . }}, protocol: UDP}
    {{- end }}
    {{- end }}
{{- end -}}
