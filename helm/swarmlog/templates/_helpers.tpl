{{/*
Names and labels.
*/}}
{{- define "swarmlog.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "swarmlog.fullname" -}}
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

{{- define "swarmlog.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "swarmlog.commonLabels" -}}
helm.sh/chart: {{ include "swarmlog.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: swarmlog
{{- end }}

{{/*
Labels of a release-wide object (ConfigMap, Secret).
*/}}
{{- define "swarmlog.labels" -}}
{{ include "swarmlog.commonLabels" . }}
app.kubernetes.io/name: {{ include "swarmlog.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of one component's objects. Takes (dict "root" $ "component" "agent" "agent" "<key>").
*/}}
{{- define "swarmlog.componentLabels" -}}
{{ include "swarmlog.commonLabels" .root }}
{{ include "swarmlog.selectorLabels" . }}
{{- end }}

{{/*
Selector labels of one component. Takes (dict "root" $ "component" "agent" "agent" "<key>").
*/}}
{{- define "swarmlog.selectorLabels" -}}
app.kubernetes.io/name: {{ include "swarmlog.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .agent }}
swarmlog.io/agent: {{ . }}
{{- end }}
{{- end }}

{{/*
An agent name as Kubernetes names and label values allow it: lowercase, `_` and `.` as `-`.
The agent keeps its real name in `--agent`; this form only names its Deployment.
*/}}
{{- define "swarmlog.agentKey" -}}
{{- . | lower | replace "_" "-" | replace "." "-" }}
{{- end }}

{{- define "swarmlog.topic" -}}
{{- .Values.kafka.topic | default (printf "swarmlog.%s" .Release.Name) }}
{{- end }}

{{- define "swarmlog.replayGroup" -}}
{{- .Values.replay.group | default (printf "swarmlog-replay.%s" (include "swarmlog.topic" .)) }}
{{- end }}

{{- define "swarmlog.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- .Values.serviceAccount.name | default (include "swarmlog.fullname" .) }}
{{- else }}
{{- .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "swarmlog.runId" -}}
{{- .Values.swarm.runId | default .Release.Name }}
{{- end }}

{{- define "swarmlog.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "swarmlog.configMapName" -}}
{{- printf "%s-env" (include "swarmlog.fullname" .) }}
{{- end }}

{{- define "swarmlog.secretName" -}}
{{- printf "%s-credentials" (include "swarmlog.fullname" .) }}
{{- end }}

{{- define "swarmlog.caDir" -}}
/etc/swarmlog/kafka-ca
{{- end }}

{{/*
Whether clients authenticate with a SASL username and password ("true" or "").
OAUTHBEARER and GSSAPI take their settings from kafka.extraConfig instead.
*/}}
{{- define "swarmlog.saslCredentials" -}}
{{- if and (hasPrefix "SASL_" .Values.kafka.securityProtocol) (has .Values.kafka.sasl.mechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512")) -}}
true
{{- end }}
{{- end }}

{{/*
Whether the chart creates its own Secret: only for credentials given inline.
*/}}
{{- define "swarmlog.chartSecret" -}}
{{- if or (and (include "swarmlog.saslCredentials" .) .Values.kafka.sasl.password) (and .Values.database.url (not .Values.database.existingSecret)) -}}
true
{{- end }}
{{- end }}

{{/*
Cross-field rules that values.schema.json cannot say clearly. Rendered by configmap.yaml,
which every release has, so a bad combination fails `helm install` before anything runs.
*/}}
{{- define "swarmlog.validate" -}}
{{- $v := .Values }}
{{- $keys := dict }}
{{- range $v.swarm.agents }}
{{- $key := include "swarmlog.agentKey" . }}
{{- if hasKey $keys $key }}
{{- fail (printf "swarm.agents: %q and %q both name the Deployment %q; rename one" (get $keys $key) . $key) }}
{{- end }}
{{- $_ := set $keys $key . }}
{{- end }}
{{- $rf := $v.kafka.replicationFactor | int }}
{{- if and (not (kindIs "invalid" $v.kafka.minInsyncReplicas)) (gt $rf 0) (gt ($v.kafka.minInsyncReplicas | int) $rf) }}
{{- fail (printf "kafka.minInsyncReplicas (%d) is above kafka.replicationFactor (%d): every acks=all write would fail with NOT_ENOUGH_REPLICAS. Production: replicationFactor 3, minInsyncReplicas 2" ($v.kafka.minInsyncReplicas | int) $rf) }}
{{- end }}
{{- if include "swarmlog.saslCredentials" . }}
{{- $sasl := $v.kafka.sasl }}
{{- if and $sasl.existingSecret $sasl.password }}
{{- fail "kafka.sasl: set either existingSecret or password, not both" }}
{{- end }}
{{- if not (or $sasl.existingSecret (and $sasl.username $sasl.password)) }}
{{- fail (printf "kafka.securityProtocol is %s with mechanism %s: set kafka.sasl.existingSecret (a Secret with keys %q and %q) or kafka.sasl.username and kafka.sasl.password" $v.kafka.securityProtocol $sasl.mechanism $sasl.usernameKey $sasl.passwordKey) }}
{{- end }}
{{- end }}
{{- if and $v.kafka.tls.caSecret (not (has $v.kafka.securityProtocol (list "SSL" "SASL_SSL"))) }}
{{- fail (printf "kafka.tls.caSecret is set but kafka.securityProtocol is %s, which does not use TLS: use SSL or SASL_SSL" $v.kafka.securityProtocol) }}
{{- end }}
{{- if $v.replay.enabled }}
{{- $group := include "swarmlog.replayGroup" . }}
{{- range $v.swarm.agents }}
{{- if eq $group (printf "swarmlog.%s.%s" (include "swarmlog.topic" $) .) }}
{{- fail (printf "replay.group %q is agent %q's own consumer group: its committed offset says how far the live agent got, and Kafka refuses to reset it while the agent runs. Leave replay.group empty for the replay's own group (%s)" $group . (printf "swarmlog-replay.%s" (include "swarmlog.topic" $))) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $name, $_ := $v.agents.overrides }}
{{- if not (has $name $v.swarm.agents) }}
{{- fail (printf "agents.overrides: %q is not one of swarm.agents (%s)" $name (join ", " $v.swarm.agents)) }}
{{- end }}
{{- end }}
{{- range $key, $_ := $v.kafka.extraConfig }}
{{- if has $key (list "bootstrap.servers" "security.protocol" "sasl.mechanism" "sasl.mechanisms" "sasl.username" "ssl.ca.location") }}
{{- fail (printf "kafka.extraConfig: set %q through its own value (kafka.bootstrapServers, kafka.securityProtocol, kafka.sasl.mechanism, kafka.sasl.username, kafka.tls.caSecret)" $key) }}
{{- end }}
{{- if or (contains "password" $key) (contains "secret" $key) (eq $key "ssl.key.pem") }}
{{- fail (printf "kafka.extraConfig: %q is a credential and extraConfig is rendered into a ConfigMap; use kafka.sasl.existingSecret, or an extraEnv entry SWARMLOG_KAFKA_%s with valueFrom.secretKeyRef" $key ($key | replace "." "_" | upper)) }}
{{- end }}
{{- end }}
{{- if and $v.database.url $v.database.existingSecret }}
{{- fail "database: set either existingSecret or url, not both" }}
{{- end }}
{{- if and (or $v.sink.enabled (and $v.replay.enabled $v.replay.publish)) (not (or $v.database.url $v.database.existingSecret)) }}
{{- fail "database: the sink and the replay's report (replay.publish) need Postgres: set database.existingSecret (a Secret holding the libpq URL) or database.url" }}
{{- end }}
{{- if and $v.regress.enabled $v.regress.fromMirror (not (or $v.database.url $v.database.existingSecret)) }}
{{- fail "database: regress.fromMirror lists the runs in Postgres: set database.existingSecret (a Secret holding the libpq URL) or database.url" }}
{{- end }}
{{- end }}

{{/*
The non-secret environment every command reads (see platform/swarmlog/settings.py), as a
YAML map of strings. The ConfigMap holds it; the topic hook Job, which runs before the
ConfigMap exists, gets the same map inline.
*/}}
{{- define "swarmlog.envData" -}}
{{- $v := .Values -}}
SWARMLOG_BOOTSTRAP_SERVERS: {{ $v.kafka.bootstrapServers | quote }}
PYTHONHASHSEED: {{ $v.swarm.hashSeed | default 0 | int64 | toString | quote }}
SWARMLOG_TOPIC: {{ include "swarmlog.topic" . | quote }}
SWARMLOG_REPLICATION_FACTOR: {{ $v.kafka.replicationFactor | int64 | toString | quote }}
{{- if not (kindIs "invalid" $v.kafka.minInsyncReplicas) }}
SWARMLOG_MIN_INSYNC_REPLICAS: {{ $v.kafka.minInsyncReplicas | int64 | toString | quote }}
{{- end }}
SWARMLOG_KAFKA_SECURITY_PROTOCOL: {{ $v.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL_" $v.kafka.securityProtocol }}
SWARMLOG_KAFKA_SASL_MECHANISM: {{ $v.kafka.sasl.mechanism | quote }}
{{- end }}
{{- if and (include "swarmlog.saslCredentials" .) $v.kafka.sasl.username }}
{{- /* A user name is no secret; an inline one is plain configuration, even beside an existingSecret that holds only the password (Strimzi's KafkaUser Secrets do). */}}
SWARMLOG_KAFKA_SASL_USERNAME: {{ $v.kafka.sasl.username | quote }}
{{- end }}
{{- if $v.kafka.tls.caSecret }}
SWARMLOG_KAFKA_SSL_CA_LOCATION: {{ printf "%s/ca.crt" (include "swarmlog.caDir" .) | quote }}
{{- end }}
{{- range $key, $value := $v.kafka.extraConfig }}
{{- /* Numbers from a values file arrive as float64; int64 keeps 1048576 from printing as 1.048576e+06. */}}
{{ printf "SWARMLOG_KAFKA_%s" ($key | replace "." "_" | upper) }}: {{ (kindIs "float64" $value | ternary ($value | int64) $value) | toString | quote }}
{{- end }}
{{- end }}

{{/*
Environment taken from Secrets. Takes (dict "root" $ "database" true|false): only the sink
and the replay Job get the database URL; agents and the topic Job don't need it.
*/}}
{{- define "swarmlog.secretEnv" -}}
{{- $v := .root.Values }}
{{- $chartSecret := include "swarmlog.secretName" .root }}
{{- if include "swarmlog.saslCredentials" .root }}
{{- $sasl := $v.kafka.sasl }}
{{- if not $sasl.username }}
- name: SWARMLOG_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.usernameKey }}
{{- end }}
- name: SWARMLOG_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      {{- if $sasl.existingSecret }}
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.passwordKey }}
      {{- else }}
      name: {{ $chartSecret }}
      key: kafka-sasl-password
      {{- end }}
{{- end }}
{{- if .database }}
- name: SWARMLOG_DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- if $v.database.existingSecret }}
      name: {{ $v.database.existingSecret }}
      key: {{ $v.database.existingSecretKey }}
      {{- else }}
      name: {{ $chartSecret }}
      key: database-url
      {{- end }}
{{- end }}
{{- end }}

{{/*
The pod template shared by every workload. Takes a dict:
  root        the top-level context ($)
  component   agent | sink | topic | replay
  agent       the agent's key (agents only)
  args        the `swarmlog` arguments
  database    whether the pod gets SWARMLOG_DATABASE_URL
  inlineEnv   put the non-secret env inline instead of referring to the ConfigMap
  values      the component's values (resources, podAnnotations, extraEnv,
              terminationGracePeriodSeconds)
  restartPolicy  for Jobs
  probes      serve metrics.port (`--metrics-port` is among the args) and probe it
*/}}
{{- define "swarmlog.podTemplate" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $c := .values -}}
metadata:
  labels:
    {{- include "swarmlog.componentLabels" (dict "root" $root "component" .component "agent" .agent) | nindent 4 }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    {{- /* Roll the pods when their configuration changes; the hash covers only what they receive. */}}
    checksum/config: {{ list (include "swarmlog.envData" $root) $v.kafka.sasl (.database | default false | ternary $v.database "") | toJson | sha256sum }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $c.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- if and .probes $v.metrics.scrapeAnnotations }}
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ $v.metrics.port | int64 | toString | quote }}
    prometheus.io/path: /metrics
    {{- end }}
spec:
  {{- with include "swarmlog.serviceAccountName" $root }}
  serviceAccountName: {{ . }}
  {{- end }}
  # swarmlog talks to Kafka and Postgres only, never to the Kubernetes API.
  automountServiceAccountToken: false
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .restartPolicy }}
  restartPolicy: {{ . }}
  {{- end }}
  {{- with $c.terminationGracePeriodSeconds }}
  terminationGracePeriodSeconds: {{ . | int64 }}
  {{- end }}
  {{- with $v.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "swarmlog.image" $root | quote }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      args:
        {{- range .args }}
        - {{ . | quote }}
        {{- end }}
      {{- with .httpPort }}
      # The console's pages (`swarmlog ui`), and its /healthz, which answers without the mirror.
      ports:
        - name: http
          containerPort: {{ . | int64 }}
          protocol: TCP
      readinessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: 10
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        initialDelaySeconds: 10
        periodSeconds: 20
      {{- end }}
      {{- if .probes }}
      ports:
        - name: metrics
          containerPort: {{ $v.metrics.port | int64 }}
          protocol: TCP
      # Ready: Kafka (and Postgres, for the sink) answer and an agent has caught up with the
      # log (a rebuilding agent is not ready yet). Live: the loop turns and no dependency
      # has been unreachable for 5 minutes. Both answered from cached checks, never blocking.
      readinessProbe:
        httpGet:
          path: /readyz
          port: metrics
        periodSeconds: 10
        failureThreshold: 3
      livenessProbe:
        httpGet:
          path: /livez
          port: metrics
        initialDelaySeconds: 10
        periodSeconds: 20
        failureThreshold: 3
      {{- end }}
      {{- if not .inlineEnv }}
      envFrom:
        - configMapRef:
            name: {{ include "swarmlog.configMapName" $root }}
      {{- end }}
      {{- $env := list }}
      {{- if .inlineEnv }}
      {{- range $name, $value := include "swarmlog.envData" $root | fromYaml }}
      {{- $env = append $env (dict "name" $name "value" $value) }}
      {{- end }}
      {{- end }}
      {{- $env = concat $env (include "swarmlog.secretEnv" (dict "root" $root "database" .database) | fromYamlArray) }}
      {{- $env = concat $env ($v.extraEnv | default list) ($c.extraEnv | default list) }}
      {{- with $env }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        # The root filesystem is read-only; anything that needs scratch space gets /tmp.
        - name: tmp
          mountPath: /tmp
        {{- if $v.kafka.tls.caSecret }}
        - name: kafka-ca
          mountPath: {{ include "swarmlog.caDir" $root }}
          readOnly: true
        {{- end }}
        {{- with $v.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $c.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.containerSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
  volumes:
    - name: tmp
      emptyDir: {}
    {{- if $v.kafka.tls.caSecret }}
    - name: kafka-ca
      secret:
        secretName: {{ $v.kafka.tls.caSecret }}
        items:
          - key: {{ $v.kafka.tls.caKey }}
            path: ca.crt
    {{- end }}
    {{- with $v.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
