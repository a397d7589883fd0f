package helmtest

import (
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const fleet = "ingero-fleet"

func TestFleetDefaults(t *testing.T) {
	objs := render(t, fleet, []string{"ci/default-values.yaml"}, nil)
	for _, absent := range []string{"StatefulSet", "Ingress", "ServiceMonitor", "Secret", "Certificate", "Issuer"} {
		if len(objs[absent]) != 0 {
			t.Errorf("defaults render a %s: %v", absent, names(objs))
		}
	}
	d := get[appsv1.Deployment](t, objs, "Deployment", fleet)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1 without sharding", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	checkRestricted(t, "fleet", pod)
	if u := pod.SecurityContext.RunAsUser; u == nil || *u != 65532 {
		t.Errorf("runAsUser %v, want the image's 65532", u)
	}
	if pod.Containers[0].ReadinessProbe == nil || pod.Containers[0].ReadinessProbe.HTTPGet.Port.StrVal != "health" {
		t.Errorf("no readiness probe on the health_check port")
	} else if s := pod.Containers[0].ReadinessProbe.HTTPGet.Scheme; s != corev1.URISchemeHTTPS {
		t.Errorf("readiness probe scheme %q, want HTTPS (TLS by default)", s)
	}
	svc := get[corev1.Service](t, objs, "Service", fleet)
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	for name, port := range map[string]int32{"otlp-grpc": 4317, "otlp-http": 4318, "threshold": 8080, "metrics": 8889, "telemetry": 8888} {
		if ports[name] != port {
			t.Errorf("Service port %s = %d, want %d", name, ports[name], port)
		}
	}
	checkDefaultDenyEgress(t, get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", fleet))
	pdb := get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", fleet)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntVal != 1 {
		t.Errorf("PDB maxUnavailable %v", pdb.Spec.MaxUnavailable)
	}
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", fleet)
	checkEveryListenerTLS(t, cm)
	if v := secretVolume(pod, "tls"); v != fleet+"-tls" && v != "fleet-tls" {
		t.Errorf("TLS volume from Secret %q", v)
	}
	validateFleetConfig(t, cm, d.Spec.Template.Spec.Containers[0].Args[4:])
}

// overlayJSON is the chart's second config file, as JSON.
func overlayJSON(t *testing.T, cm *corev1.ConfigMap) string {
	t.Helper()
	var overlay map[string]any
	if err := yaml.UnmarshalStrict([]byte(cm.Data["overlay.yaml"]), &overlay); err != nil {
		t.Fatal(err)
	}
	return string(mustJSON(t, overlay))
}

// checkEveryListenerTLS: the overlay puts a tls block on each of Fleet's six listeners and
// does not allow plaintext.
func checkEveryListenerTLS(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	var overlay struct {
		Receivers struct {
			Otlp struct {
				Protocols map[string]map[string]any `json:"protocols"`
			} `json:"otlp"`
		} `json:"receivers"`
		Extensions map[string]map[string]any `json:"extensions"`
		Exporters  map[string]map[string]any `json:"exporters"`
		Service    map[string]any            `json:"service"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["overlay.yaml"]), &overlay); err != nil {
		t.Fatal(err)
	}
	for what, block := range map[string]map[string]any{
		"otlp grpc":        overlay.Receivers.Otlp.Protocols["grpc"],
		"otlp http":        overlay.Receivers.Otlp.Protocols["http"],
		"ingero_threshold": overlay.Extensions["ingero_threshold"],
		"health_check":     overlay.Extensions["health_check"],
		"prometheus":       overlay.Exporters["prometheus"],
	} {
		if block == nil || block["tls"] == nil {
			t.Errorf("%s has no tls block: %s", what, cm.Data["overlay.yaml"])
		}
	}
	js := overlayJSON(t, cm)
	if !strings.Contains(js, `"readers":[{"pull":{"exporter":{"prometheus":{"host":"0.0.0.0","port":8888,"tls":{`) {
		t.Errorf("self-telemetry has no tls block: %s", js)
	}
	if strings.Contains(js, "allow_plaintext_listeners") || strings.Contains(cm.Data["fleet.yaml"], "allow_plaintext_listeners") {
		t.Errorf("plaintext allowed with TLS on:\n%s\n%s", cm.Data["fleet.yaml"], cm.Data["overlay.yaml"])
	}
}

func secretVolume(pod corev1.PodSpec, name string) string {
	for _, v := range pod.Volumes {
		if v.Name == name && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

func TestFleetPlaintextOnlyAsAnExplicitValue(t *testing.T) {
	renderFails(t, fleet, nil, "TLS is on by default (tls.enabled) and needs a certificate")
	objs := render(t, fleet, nil, map[string]any{"tls": map[string]any{"enabled": false}})
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", fleet)
	js := overlayJSON(t, cm)
	if js != `{"service":{"allow_plaintext_listeners":true}}` {
		t.Errorf("plaintext overlay %s", js)
	}
	d := get[appsv1.Deployment](t, objs, "Deployment", fleet)
	if s := d.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Scheme; s != corev1.URISchemeHTTP && s != "" {
		t.Errorf("plaintext probe scheme %q", s)
	}
	if secretVolume(d.Spec.Template.Spec, "tls") != "" {
		t.Errorf("a TLS volume without TLS")
	}
	validateFleetConfig(t, cm, d.Spec.Template.Spec.Containers[0].Args[4:])
}

func TestFleetCertManagerWhenPresent(t *testing.T) {
	out, err := renderChartWith(fleet, nil, nil, nil, []string{"cert-manager.io/v1"})
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out)
	crt := get[certificate](t, objs, "Certificate", fleet+"-tls")
	if crt.Spec.SecretName != fleet+"-tls" || crt.Spec.IssuerRef.Name != fleet+"-ca" || crt.Spec.IssuerRef.Kind != "Issuer" {
		t.Errorf("listener Certificate %+v", crt.Spec)
	}
	if !strings.Contains(strings.Join(crt.Spec.DNSNames, " "), fleet+".ingero.svc") {
		t.Errorf("Certificate names %v lack the Service", crt.Spec.DNSNames)
	}
	ca := get[certificate](t, objs, "Certificate", fleet+"-ca")
	if !ca.Spec.IsCA || ca.Spec.IssuerRef.Name != fleet+"-selfsigned" {
		t.Errorf("CA Certificate %+v", ca.Spec)
	}
	if get[issuer](t, objs, "Issuer", fleet+"-ca").Spec.CA == nil || get[issuer](t, objs, "Issuer", fleet+"-selfsigned").Spec.SelfSigned == nil {
		t.Errorf("Issuers %v", names(objs))
	}
	if len(objs["Secret"]) != 0 {
		t.Errorf("cert-manager makes the Secret; the chart made %v", names(objs))
	}
	d := get[appsv1.Deployment](t, objs, "Deployment", fleet)
	if secretVolume(d.Spec.Template.Spec, "tls") != fleet+"-tls" {
		t.Errorf("TLS volume not from the Certificate's Secret")
	}
	checkEveryListenerTLS(t, get[corev1.ConfigMap](t, objs, "ConfigMap", fleet))

	// A given issuer: no CA of the chart's own.
	out, err = renderChartWith(fleet, nil, map[string]any{"tls": map[string]any{"certManager": map[string]any{
		"issuerRef": map[string]any{"name": "corp-ca", "kind": "ClusterIssuer"}}}}, nil, []string{"cert-manager.io/v1"})
	if err != nil {
		t.Fatal(err)
	}
	objs = decodeAll(t, out)
	if len(objs["Issuer"]) != 0 || len(objs["Certificate"]) != 1 {
		t.Errorf("with an issuerRef: %v", names(objs))
	}
	if r := get[certificate](t, objs, "Certificate", fleet+"-tls").Spec.IssuerRef; r.Name != "corp-ca" || r.Kind != "ClusterIssuer" {
		t.Errorf("issuerRef %+v", r)
	}
	// An existing Secret wins over cert-manager.
	out, err = renderChartWith(fleet, []string{"ci/default-values.yaml"}, nil, nil, []string{"cert-manager.io/v1"})
	if err != nil {
		t.Fatal(err)
	}
	if objs = decodeAll(t, out); len(objs["Certificate"]) != 0 {
		t.Errorf("existingSecret and a Certificate: %v", names(objs))
	}
}

func TestFleetProduction(t *testing.T) {
	objs := render(t, fleet, []string{"ci/production-values.yaml"}, nil)
	if len(objs["Deployment"]) != 1 { // only the front end
		t.Errorf("Deployments: %v", names(objs))
	}
	ss := get[appsv1.StatefulSet](t, objs, "StatefulSet", fleet)
	if *ss.Spec.Replicas != 3 || ss.Spec.ServiceName != fleet+"-replicas" {
		t.Errorf("StatefulSet replicas %d service %q", *ss.Spec.Replicas, ss.Spec.ServiceName)
	}
	pod := ss.Spec.Template.Spec
	checkRestricted(t, "fleet", pod)
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 40 {
		t.Errorf("grace period %v, want shutdownTimeout 20s + 20", g)
	}
	args := containerArgs(pod)
	for _, want := range []string{"--shutdown-timeout 20s", "--set service.telemetry.logs.level=warn"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if ef := pod.Containers[0].EnvFrom; len(ef) != 1 || ef[0].SecretRef.Name != fleet+"-auth-tokens" {
		t.Errorf("token env from %v", ef)
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400) {
			t.Errorf("secret volume %s mode %v, want 0400", v.Name, v.Secret.DefaultMode)
		}
	}

	headless := get[corev1.Service](t, objs, "Service", fleet+"-replicas")
	if headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless Service: clusterIP %q publishNotReady %v", headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	front := get[corev1.Service](t, objs, "Service", fleet)
	if front.Spec.Selector["app.kubernetes.io/component"] != "front-end" {
		t.Errorf("the agents' Service selects %v, not the front end", front.Spec.Selector)
	}
	fe := get[appsv1.Deployment](t, objs, "Deployment", fleet+"-front-end")
	checkRestricted(t, "front end", fe.Spec.Template.Spec)
	conf := get[corev1.ConfigMap](t, objs, "ConfigMap", fleet+"-front-end").Data["nginx.conf"]
	if !strings.Contains(conf, "hash $arg_cluster_id consistent;") {
		t.Errorf("nginx.conf has no consistent hash on cluster_id:\n%s", conf)
	}
	for i := 0; i < 3; i++ {
		for _, want := range []string{
			"server unix:/run/nginx/ingero-fleet-" + string(rune('0'+i)) + ".sock",
			"server ingero-fleet-" + string(rune('0'+i)) + ".ingero-fleet-replicas:8080; keepalive 16;",
			"server ingero-fleet-" + string(rune('0'+i)) + ".ingero-fleet-replicas:4318; keepalive 16;",
			"proxy_pass https://ingero-fleet-" + string(rune('0'+i)) + "-api;",
			"proxy_pass https://ingero-fleet-" + string(rune('0'+i)) + "-otlp;",
			"proxy_ssl_name ingero-fleet-" + string(rune('0'+i)) + ".ingero-fleet-replicas.ingero.svc;",
		} {
			if !strings.Contains(conf, want) {
				t.Errorf("nginx.conf lacks %q", want)
			}
		}
	}
	for _, want := range []string{"listen 4318 ssl;", "ssl_verify_client optional;", "proxy_ssl_verify on;",
		"proxy_ssl_trusted_certificate /etc/nginx/tls/ca.crt;", "proxy_ssl_certificate ${ingero_tls}tls.crt;",
		`map $ssl_server_name $ingero_tls { default "/etc/nginx/tls/"; }`} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx.conf lacks %q", want)
		}
	}
	if strings.Contains(conf, "ingero-fleet-3") {
		t.Errorf("nginx.conf names a fourth replica")
	}

	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", fleet)
	checkDefaultDenyEgress(t, np)
	from := np.Spec.Ingress[0].From
	if len(from) != 3 || from[2].PodSelector.MatchLabels["app.kubernetes.io/component"] != "front-end" {
		t.Errorf("Fleet ingress from %v: want the two namespaces and the front end", from)
	}
	fenp := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", fleet+"-front-end")
	if len(fenp.Spec.Egress) != 2 || fenp.Spec.Egress[0].To[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "collector" {
		t.Errorf("front end egress %v: want the replicas and DNS only", fenp.Spec.Egress)
	}

	ing := get[networkingv1.Ingress](t, objs, "Ingress", fleet)
	paths := map[string]string{}
	for _, p := range ing.Spec.Rules[0].HTTP.Paths {
		paths[p.Path] = p.Backend.Service.Port.Name
	}
	if paths["/v1/"] != "otlp-http" || paths["/api/v1/threshold"] != "threshold" || len(ing.Spec.TLS) != 1 {
		t.Errorf("Ingress paths %v tls %v", paths, ing.Spec.TLS)
	}
	sm := get[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor", fleet)
	if len(sm.Spec.Endpoints) != 2 || sm.Spec.Endpoints[0].Scheme == nil || *sm.Spec.Endpoints[0].Scheme != "https" {
		t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
	}
	if sm.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "collector" {
		t.Errorf("ServiceMonitor selects %v: want the per-replica Service", sm.Spec.Selector.MatchLabels)
	}
	if len(objs["PodDisruptionBudget"]) != 2 {
		t.Errorf("want PDBs for the replicas and the front end: %v", names(objs))
	}

	// The overlay: TLS (mTLS on the agent listeners) and auth on the receivers and API.
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", fleet)
	checkEveryListenerTLS(t, cm)
	js := overlayJSON(t, cm)
	for _, want := range []string{
		`"client_ca_file":"/etc/ingero/tls/ca.crt"`, `"authenticator":"ingero_auth"`,
		`"tokens_file":"/etc/ingero/auth/tokens.yaml"`, `"extensions":["ingero_auth","ingero_threshold","health_check"]`,
		`"reload_interval":"1m"`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("overlay lacks %s: %s", want, js)
		}
	}
	tokens := get[corev1.Secret](t, objs, "Secret", fleet+"-auth")
	var list []map[string]any
	if err := yaml.UnmarshalStrict(tokens.Data["tokens.yaml"], &list); err != nil || len(list) != 2 {
		t.Errorf("tokens.yaml: %v %v", err, list)
	}
}

func TestFleetInlineTLSMakesTheSecret(t *testing.T) {
	objs := render(t, fleet, nil, map[string]any{"tls": map[string]any{
		"enabled": true, "cert": "CERT PEM", "key": "KEY PEM", "clientCA": "CA PEM"}})
	s := get[corev1.Secret](t, objs, "Secret", fleet+"-tls")
	if s.Type != corev1.SecretTypeTLS || string(s.Data["tls.crt"]) != "CERT PEM" || string(s.Data["ca.crt"]) != "CA PEM" {
		t.Errorf("TLS Secret %v %v", s.Type, s.Data)
	}
}

func TestFleetRefusals(t *testing.T) {
	renderFails(t, fleet, map[string]any{"tls": map[string]any{"enabled": true}}, "TLS is on by default")
	renderFails(t, fleet, map[string]any{"tls": map[string]any{"certManager": map[string]any{"enabled": true}}}, "cert-manager API (cert-manager.io/v1) is not installed")
	renderFails(t, fleet, map[string]any{"tls": map[string]any{"enabled": true, "cert": "c", "key": "k"}}, "tls.requireClientCert needs tls.clientCA")
	tls := map[string]any{"existingSecret": "fleet-tls"}
	renderFails(t, fleet, map[string]any{"tls": tls, "auth": map[string]any{"enabled": true}}, "auth.enabled needs")
	renderFails(t, fleet, map[string]any{"tls": tls, "sharding": map[string]any{"enabled": true, "replicas": 1}}, "sharding.replicas must be at least 2")
	renderFails(t, fleet, map[string]any{"tls": map[string]any{"cert": "c", "key": "k", "requireClientCert": false},
		"sharding": map[string]any{"enabled": true}}, "sharding with TLS needs tls.clientCA")
	renderFails(t, fleet, map[string]any{"tls": tls, "shutdownTimeout": "1m"}, "shutdownTimeout must be whole seconds")
	renderFails(t, fleet, map[string]any{"tls": map[string]any{"certManager": map[string]any{"enabled": "yes"}}}, "tls.certManager.enabled must be auto, true or false")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// echoValues turns on the otlp/echo exporter with the least it needs.
func echoValues(extra map[string]any) map[string]any {
	e := map[string]any{"enabled": true, "endpoint": "ingero-echo.ingero.svc.cluster.local:4327",
		"token": map[string]any{"secretName": "echo-fleet-token"}}
	for k, v := range extra {
		e[k] = v
	}
	return e
}

// echoExporter is the otlp/echo block of a render's overlay, and the metrics pipeline.
func echoExporter(t *testing.T, objs objects) (map[string]any, map[string]any) {
	t.Helper()
	var overlay struct {
		Exporters map[string]map[string]any `json:"exporters"`
		Service   struct {
			Pipelines map[string]map[string]any `json:"pipelines"`
		} `json:"service"`
	}
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", fleet)
	if err := yaml.Unmarshal([]byte(cm.Data["overlay.yaml"]), &overlay); err != nil {
		t.Fatal(err)
	}
	return overlay.Exporters["otlp/echo"], overlay.Service.Pipelines["metrics"]
}

func TestFleetForwardsToEchoOverTLS(t *testing.T) {
	// Off by default: no exporter, no egress.
	objs := render(t, fleet, []string{"ci/default-values.yaml"}, nil)
	if exp, _ := echoExporter(t, objs); exp != nil {
		t.Errorf("otlp/echo without echo.enabled: %v", exp)
	}

	// TLS with this release's CA and certificate, the token from a Secret.
	objs = render(t, fleet, []string{"ci/default-values.yaml"}, map[string]any{"echo": echoValues(nil)})
	exp, pipeline := echoExporter(t, objs)
	js := string(mustJSON(t, exp))
	for _, want := range []string{
		`"endpoint":"ingero-echo.ingero.svc.cluster.local:4327"`,
		`"tls":{"ca_file":"/etc/ingero/tls/ca.crt","cert_file":"/etc/ingero/tls/tls.crt","key_file":"/etc/ingero/tls/tls.key"}`,
		`"headers":{"authorization":"Bearer ${env:INGERO_ECHO_TOKEN}"}`,
		`"sending_queue":{"enabled":true,"queue_size":1000}`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("otlp/echo lacks %s: %s", want, js)
		}
	}
	if strings.Contains(js, "insecure") {
		t.Errorf("otlp/echo is plaintext by default: %s", js)
	}
	if got := string(mustJSON(t, pipeline)); got != `{"exporters":["prometheus","otlp/echo"],"processors":["ingero","nccl_peer_lag","provider_lookup"],"receivers":["otlp"]}` {
		t.Errorf("metrics pipeline %s", got)
	}
	d := get[appsv1.Deployment](t, objs, "Deployment", fleet)
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Env) != 1 || c.Env[0].Name != "INGERO_ECHO_TOKEN" || c.Env[0].ValueFrom.SecretKeyRef.Name != "echo-fleet-token" ||
		c.Env[0].ValueFrom.SecretKeyRef.Key != "token" {
		t.Errorf("token env %+v", c.Env)
	}
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", fleet)
	if len(np.Spec.Egress) != 2 || np.Spec.Egress[0].Ports[0].Port.IntVal != 4327 || np.Spec.Egress[1].Ports[0].Port.IntVal != 53 {
		t.Errorf("egress with echo.enabled %+v: want Echo's port and DNS", np.Spec.Egress)
	}
	validateFleetConfig(t, get[corev1.ConfigMap](t, objs, "ConfigMap", fleet), c.Args[4:])

	// Echo's CA and a client certificate of their own, a server name, narrowed egress.
	objs = render(t, fleet, []string{"ci/production-values.yaml"}, map[string]any{"echo": echoValues(map[string]any{
		"tls":             map[string]any{"caSecret": "echo-ca", "caKey": "root.pem", "clientCertSecret": "fleet-to-echo", "serverName": "echo.internal"},
		"networkPolicyTo": []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "ingero-echo"}}}},
	})})
	exp, _ = echoExporter(t, objs)
	if js := string(mustJSON(t, exp["tls"])); js != `{"ca_file":"/etc/ingero/echo-ca/ca.crt","cert_file":"/etc/ingero/echo-client/tls.crt","key_file":"/etc/ingero/echo-client/tls.key","server_name_override":"echo.internal"}` {
		t.Errorf("otlp/echo tls %s", js)
	}
	ss := get[appsv1.StatefulSet](t, objs, "StatefulSet", fleet)
	pod := ss.Spec.Template.Spec
	if secretVolume(pod, "echo-ca") != "echo-ca" || secretVolume(pod, "echo-client") != "fleet-to-echo" {
		t.Errorf("Echo's CA and client certificate volumes: %+v", pod.Volumes)
	}
	for _, v := range pod.Volumes {
		if v.Name == "echo-ca" && (len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "root.pem" || v.Secret.Items[0].Path != "ca.crt") {
			t.Errorf("echo-ca items %+v", v.Secret.Items)
		}
	}
	np = get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", fleet)
	if len(np.Spec.Egress) != 2 || len(np.Spec.Egress[0].To) != 1 || np.Spec.Egress[0].To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "ingero-echo" {
		t.Errorf("egress to Echo %+v", np.Spec.Egress)
	}
	validateFleetConfig(t, get[corev1.ConfigMap](t, objs, "ConfigMap", fleet), pod.Containers[0].Args[4:])

	// cert-manager: the release's Certificate (client auth too) and its CA.
	out, err := renderChartWith(fleet, nil, map[string]any{"echo": echoValues(nil)}, nil, []string{"cert-manager.io/v1"})
	if err != nil {
		t.Fatal(err)
	}
	objs = decodeAll(t, out)
	exp, _ = echoExporter(t, objs)
	if tls, _ := exp["tls"].(map[string]any); tls["ca_file"] != "/etc/ingero/tls/ca.crt" || tls["cert_file"] != "/etc/ingero/tls/tls.crt" {
		t.Errorf("otlp/echo tls with cert-manager %v", exp["tls"])
	}
	if u := strings.Join(get[certificate](t, objs, "Certificate", fleet+"-tls").Spec.Usages, ","); !strings.Contains(u, "client auth") {
		t.Errorf("the release's Certificate cannot be a client certificate for Echo: usages %s", u)
	}

	// Plaintext only as the explicit value.
	objs = render(t, fleet, nil, map[string]any{"tls": map[string]any{"enabled": false},
		"echo": echoValues(map[string]any{"plaintext": true})})
	exp, _ = echoExporter(t, objs)
	if js := string(mustJSON(t, exp["tls"])); js != `{"insecure":true}` {
		t.Errorf("otlp/echo with echo.plaintext: tls %s", js)
	}
	d = get[appsv1.Deployment](t, objs, "Deployment", fleet)
	validateFleetConfig(t, get[corev1.ConfigMap](t, objs, "ConfigMap", fleet), d.Spec.Template.Spec.Containers[0].Args[4:])

	tls := map[string]any{"existingSecret": "fleet-tls"}
	renderFails(t, fleet, map[string]any{"tls": tls, "echo": echoValues(map[string]any{"endpoint": "https://echo:4327"})}, "echo.endpoint must be")
	renderFails(t, fleet, map[string]any{"tls": tls, "echo": echoValues(map[string]any{"endpoint": ""})}, "echo.endpoint must be")
	renderFails(t, fleet, map[string]any{"tls": tls, "echo": echoValues(map[string]any{"token": map[string]any{"secretName": ""}})}, "echo.token.secretName is needed")
	renderFails(t, fleet, map[string]any{"tls": map[string]any{"enabled": false}, "echo": echoValues(nil)}, "echo.tls.caSecret is needed")
	// Without a token when Echo takes none on OTLP.
	objs = render(t, fleet, nil, map[string]any{"tls": tls, "echo": echoValues(map[string]any{"token": map[string]any{"secretName": "", "required": false}})})
	if exp, _ = echoExporter(t, objs); exp["headers"] != nil {
		t.Errorf("headers without a token: %v", exp["headers"])
	}
}
