package helmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const echo = "ingero-echo"

// The encryption values ci/default-values.yaml sets, for the refusal tests' sets.
var echoEncrypted = map[string]any{"storageClassName": "encrypted-ssd", "storageClassEncrypted": true}
var echoTokens = map[string]any{"tokensFile": []any{map[string]any{"name": "ops", "token_env": "T", "clusters": []any{"*"}}}}

// checkEchoStatefulSet: one replica, the restricted pod, the store's volume claim mounted
// where the config puts the data directory, the encryption decision recorded.
func checkEchoStatefulSet(t *testing.T, objs objects, wantClass, wantSize, wantEncryption string) *appsv1.StatefulSet {
	t.Helper()
	ss := get[appsv1.StatefulSet](t, objs, "StatefulSet", echo)
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1 (one writer per store)", ss.Spec.Replicas)
	}
	if ss.Spec.ServiceName != echo+"-headless" {
		t.Errorf("serviceName %q", ss.Spec.ServiceName)
	}
	pod := ss.Spec.Template.Spec
	checkRestricted(t, "echo", pod)
	if u := pod.SecurityContext.RunAsUser; u == nil || *u != 65532 {
		t.Errorf("runAsUser %v, want the image's 65532", u)
	}
	if g := pod.SecurityContext.FSGroup; g == nil || *g != 65532 {
		t.Errorf("fsGroup %v, want 65532 (the volume writable for the image's user)", g)
	}
	c := pod.Containers[0]
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "health" {
			t.Errorf("a probe is not on the health_check port: %+v", p)
		}
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("volumeClaimTemplates %d, want 1", len(ss.Spec.VolumeClaimTemplates))
	}
	pvc := ss.Spec.VolumeClaimTemplates[0]
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if pvc.Name != "data" || class != wantClass || size.String() != wantSize {
		t.Errorf("claim %s class %q size %s, want data %q %s", pvc.Name, class, size.String(), wantClass, wantSize)
	}
	if pvc.Annotations["ingero.io/storage-encryption"] != wantEncryption || ss.Annotations["ingero.io/storage-encryption"] != wantEncryption {
		t.Errorf("storage-encryption annotations: claim %q, StatefulSet %q, want %q",
			pvc.Annotations["ingero.io/storage-encryption"], ss.Annotations["ingero.io/storage-encryption"], wantEncryption)
	}
	// The claim is mounted at the config's data_dir.
	var cfg struct {
		Exporters struct {
			Echo struct {
				DataDir string `json:"data_dir"`
			} `json:"echo"`
		} `json:"exporters"`
	}
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", echo)
	if err := yaml.Unmarshal([]byte(cm.Data["echo.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	mounted := ""
	for _, m := range c.VolumeMounts {
		if m.Name == "data" {
			mounted = m.MountPath
		}
	}
	if cfg.Exporters.Echo.DataDir == "" || mounted != cfg.Exporters.Echo.DataDir {
		t.Errorf("data_dir %q, the claim is mounted at %q", cfg.Exporters.Echo.DataDir, mounted)
	}
	if ss.Spec.PersistentVolumeClaimRetentionPolicy == nil || ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("claim retention %+v: the history must outlive the release", ss.Spec.PersistentVolumeClaimRetentionPolicy)
	}
	return ss
}

func echoOverlay(t *testing.T, objs objects) string {
	t.Helper()
	var overlay map[string]any
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", echo)
	if err := yaml.UnmarshalStrict([]byte(cm.Data["overlay.yaml"]), &overlay); err != nil {
		t.Fatal(err)
	}
	return string(mustJSON(t, overlay))
}

// validateEchoConfig runs `ingero-echo --config echo.yaml --config overlay.yaml ... validate`
// on a rendered ConfigMap, with the store and the tokens file moved to a temporary
// directory and the token values in the environment (skipped when ECHO_BIN is unset:
// scripts/helm-test.sh sets it).
func validateEchoConfig(t *testing.T, objs objects, ss *appsv1.StatefulSet, tokensFile []byte, env map[string]string) {
	t.Helper()
	bin := os.Getenv("ECHO_BIN")
	if bin == "" {
		t.Log("ECHO_BIN unset: the rendered config is not validated by ingero-echo")
		return
	}
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", echo)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, tokensFile, 0o600); err != nil {
		t.Fatal(err)
	}
	// The TLS Secret's mount point, here a directory of test certificates.
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeTestTLS(t, tlsDir)
	fix := strings.NewReplacer("/var/lib/ingero-echo", filepath.Join(dir, "data"),
		"/etc/ingero/auth/tokens.yaml", tokens, "/etc/ingero/tls", tlsDir)
	args := []string{}
	for _, f := range []string{"echo.yaml", "overlay.yaml"} {
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p, []byte(fix.Replace(cm.Data[f])), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", p)
	}
	args = append(append(args, ss.Spec.Template.Spec.Containers[0].Args[4:]...), "validate")
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ingero-echo %v: %v\n%s\necho.yaml:\n%s\noverlay.yaml:\n%s", args, err, out, cm.Data["echo.yaml"], cm.Data["overlay.yaml"])
	}
}

func TestEchoDefaults(t *testing.T) {
	objs := render(t, echo, []string{"ci/default-values.yaml"}, nil)
	for _, absent := range []string{"Deployment", "Ingress", "ServiceMonitor"} {
		if len(objs[absent]) != 0 {
			t.Errorf("defaults render a %s: %v", absent, names(objs))
		}
	}
	ss := checkEchoStatefulSet(t, objs, "encrypted-ssd", "50Gi", "declared-encrypted")
	svc := get[corev1.Service](t, objs, "Service", echo)
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	for name, port := range map[string]int32{"otlp-grpc": 4327, "otlp-http": 4328, "api": 8090, "telemetry": 8898} {
		if ports[name] != port {
			t.Errorf("Service port %s = %d, want %d", name, ports[name], port)
		}
	}
	if h := get[corev1.Service](t, objs, "Service", echo+"-headless"); h.Spec.ClusterIP != "None" {
		t.Errorf("governing Service clusterIP %q, want None", h.Spec.ClusterIP)
	}
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", echo)
	checkDefaultDenyEgress(t, np)
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 5 || len(np.Spec.Ingress[0].From) != 0 {
		t.Errorf("ingress %+v: want Echo's five ports from anywhere", np.Spec.Ingress)
	}
	pdb := get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", echo)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntVal != 1 {
		t.Errorf("PDB maxUnavailable %v", pdb.Spec.MaxUnavailable)
	}
	pod := ss.Spec.Template.Spec
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 60 {
		t.Errorf("grace period %v, want shutdownTimeout 10s + 50", g)
	}

	// Bearer tokens on the API and on OTLP (both on by default), TLS on every listener (mTLS
	// on OTLP), the Service's names for /mcp.
	js := echoOverlay(t, objs)
	tls := `"tls":{"cert_file":"/etc/ingero/tls/tls.crt","key_file":"/etc/ingero/tls/tls.key","reload_interval":"30s"}`
	mtls := `"tls":{"cert_file":"/etc/ingero/tls/tls.crt","client_ca_file":"/etc/ingero/tls/ca.crt","key_file":"/etc/ingero/tls/tls.key","reload_interval":"30s"}`
	for _, want := range []string{
		`"tokens_file":"/etc/ingero/auth/tokens.yaml"`, `"extensions":["ingero_auth","echo_api","health_check"]`,
		`"echo_api":{"allowed_hosts":["localhost","127.0.0.1","[::1]","ingero-echo","ingero-echo.ingero","ingero-echo.ingero.svc","ingero-echo.ingero.svc.cluster.local"],"auth":{"authenticator":"ingero_auth"},` + tls + `}`,
		`"grpc":{"auth":{"authenticator":"ingero_auth"},` + mtls + `}`,
		`"http":{"auth":{"authenticator":"ingero_auth"},` + mtls + `}`,
		`"health_check":{` + tls + `}`,
		`"prometheus":{"host":"0.0.0.0","port":8898,` + tls + `}`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("overlay lacks %s: %s", want, js)
		}
	}
	if strings.Contains(js, "allow_plaintext_listeners") || strings.Contains(get[corev1.ConfigMap](t, objs, "ConfigMap", echo).Data["echo.yaml"], "allow_plaintext_listeners") {
		t.Errorf("plaintext allowed with TLS on: %s", js)
	}
	if p := pod.Containers[0].ReadinessProbe.HTTPGet.Scheme; p != corev1.URISchemeHTTPS {
		t.Errorf("readiness probe scheme %q, want HTTPS", p)
	}
	mounted := false
	for _, v := range pod.Volumes {
		if v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "echo-tls" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the TLS Secret is not mounted: %+v", pod.Volumes)
	}
	tokens := get[corev1.Secret](t, objs, "Secret", echo+"-auth")
	values := get[corev1.Secret](t, objs, "Secret", echo+"-auth-tokens")
	if ef := pod.Containers[0].EnvFrom; len(ef) != 1 || ef[0].SecretRef.Name != echo+"-auth-tokens" {
		t.Errorf("token env from %v", ef)
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400) {
			t.Errorf("secret volume %s mode %v, want 0400", v.Name, v.Secret.DefaultMode)
		}
	}
	env := map[string]string{}
	for k, v := range values.Data {
		env[k] = string(v)
	}
	validateEchoConfig(t, objs, ss, tokens.Data["tokens.yaml"], env)
}

func TestEchoProduction(t *testing.T) {
	objs := render(t, echo, []string{"ci/production-values.yaml"}, nil)
	ss := checkEchoStatefulSet(t, objs, "gp3-encrypted", "500Gi", "declared-encrypted")
	pod := ss.Spec.Template.Spec
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 70 {
		t.Errorf("grace period %v, want shutdownTimeout 20s + 50", g)
	}
	if args := containerArgs(pod); !strings.Contains(args, "--shutdown-timeout 20s") || !strings.Contains(args, "--set service.telemetry.logs.level=warn") {
		t.Errorf("args %q", args)
	}
	// The tokens file from the existing Secret: the chart makes only the values' Secret.
	if _, made := objs["Secret"][echo+"-auth"]; made {
		t.Errorf("auth.existingSecret given, yet the chart makes %s-auth", echo)
	}
	for _, v := range pod.Volumes {
		if v.Name == "auth" && v.Secret.SecretName != "echo-tokens" {
			t.Errorf("tokens file from %q, want the existing Secret echo-tokens", v.Secret.SecretName)
		}
	}
	js := echoOverlay(t, objs)
	for _, want := range []string{
		`"grpc":{"auth":{"authenticator":"ingero_auth"},"tls":{"cert_file":"/etc/ingero/tls/tls.crt","client_ca_file":"/etc/ingero/tls/ca.crt"`,
		`"ingero-echo.ingero.svc.cluster.local","echo.example.com"]`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("overlay lacks %s: %s", want, js)
		}
	}
	sm := get[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor", echo)
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "telemetry" {
		t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
	}
	pdb := get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", echo)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntVal != 0 {
		t.Errorf("PDB maxUnavailable %v, want the values' 0", pdb.Spec.MaxUnavailable)
	}
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", echo)
	checkDefaultDenyEgress(t, np)
	if from := np.Spec.Ingress[0].From; len(from) != 3 {
		t.Errorf("ingress from %v: want Fleet's pods and two namespaces", from)
	}
	values := get[corev1.Secret](t, objs, "Secret", echo+"-auth-tokens")
	env := map[string]string{}
	var file []map[string]any
	for k, v := range values.Data {
		env[k] = string(v)
		file = append(file, map[string]any{"name": strings.ToLower(k), "token_env": k, "clusters": []string{"*"}})
	}
	tokens, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	validateEchoConfig(t, objs, ss, tokens, env)
}

// The install fails closed: without a StorageClass declared encrypted, nothing renders,
// and only the explicit allowUnencrypted overrides it. Strings are refused, not read
// ("false" is true to a template).
func TestEchoStorageEncryptionFailsClosed(t *testing.T) {
	const refused = "refusing to install: Echo's volume holds the cluster's whole history and its StorageClass is not declared encrypted at rest"
	renderFails(t, echo, nil, refused)
	renderFails(t, echo, map[string]any{"auth": echoTokens}, refused)
	renderFails(t, echo, map[string]any{"auth": echoTokens, "persistence": map[string]any{"storageClassName": "fast-ssd"}}, refused)
	renderFails(t, echo, map[string]any{"auth": echoTokens, "persistence": map[string]any{"storageClassEncrypted": false, "allowUnencrypted": false}}, refused)
	renderFails(t, echo, map[string]any{"auth": echoTokens, "persistence": map[string]any{"storageClassName": "x", "storageClassEncrypted": "true"}},
		`persistence.storageClassEncrypted must be a boolean (true or false), not "true"`)
	renderFails(t, echo, map[string]any{"auth": echoTokens, "persistence": map[string]any{"storageClassName": "x", "storageClassEncrypted": "false"}},
		`persistence.storageClassEncrypted must be a boolean`)
	renderFails(t, echo, map[string]any{"auth": echoTokens, "persistence": map[string]any{"allowUnencrypted": "true"}},
		`persistence.allowUnencrypted must be a boolean`)
	renderFails(t, echo, map[string]any{"auth": echoTokens, "persistence": map[string]any{"storageClassEncrypted": true}},
		"persistence.storageClassName names none")

	// The explicit override renders, on the cluster's default class, and says so.
	objs := render(t, echo, nil, map[string]any{"auth": echoTokens, "tls": echoTLS, "persistence": map[string]any{"allowUnencrypted": true}})
	checkEchoStatefulSet(t, objs, "", "50Gi", "unencrypted-allowed")
	// Declared encrypted wins over the override.
	objs = render(t, echo, nil, map[string]any{"auth": echoTokens, "tls": echoTLS, "persistence": map[string]any{"allowUnencrypted": true, "storageClassName": "enc", "storageClassEncrypted": true}})
	checkEchoStatefulSet(t, objs, "enc", "50Gi", "declared-encrypted")
}

func TestEchoRefusals(t *testing.T) {
	renderFails(t, echo, map[string]any{"persistence": echoEncrypted}, "auth.enabled needs auth.tokensFile")
	renderFails(t, echo, map[string]any{"persistence": echoEncrypted, "auth": echoTokens, "shutdownTimeout": "1m"}, "shutdownTimeout must be whole seconds")
	// auth off is explicit, and then nothing of it renders.
	objs := render(t, echo, nil, map[string]any{"persistence": echoEncrypted, "tls": echoTLS, "auth": map[string]any{"enabled": false}})
	if len(objs["Secret"]) != 0 {
		t.Errorf("auth off renders Secrets: %v", names(objs))
	}
	if js := echoOverlay(t, objs); strings.Contains(js, "ingero_auth") {
		t.Errorf("auth off, overlay %s", js)
	}
	ss := get[appsv1.StatefulSet](t, objs, "StatefulSet", echo)
	if slices.ContainsFunc(ss.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "auth" }) {
		t.Errorf("auth off mounts the tokens")
	}
}

var echoTLS = map[string]any{"existingSecret": "echo-tls"}

// TLS is on by default and needs a certificate; plaintext only as an explicit value.
func TestEchoTLSByDefault(t *testing.T) {
	renderFails(t, echo, map[string]any{"persistence": echoEncrypted, "auth": echoTokens}, "TLS is on by default (tls.enabled) and needs a certificate")
	renderFails(t, echo, map[string]any{"persistence": echoEncrypted, "auth": echoTokens, "tls": map[string]any{"cert": "c", "key": "k"}}, "tls.requireClientCert needs tls.clientCA")
	objs := render(t, echo, nil, map[string]any{"persistence": echoEncrypted, "auth": echoTokens, "tls": map[string]any{"enabled": false}})
	js := echoOverlay(t, objs)
	if !strings.Contains(js, `"allow_plaintext_listeners":true`) || strings.Contains(js, `"tls"`) {
		t.Errorf("plaintext overlay %s", js)
	}
	objs = render(t, echo, nil, map[string]any{"persistence": echoEncrypted, "auth": echoTokens, "tls": map[string]any{"cert": "CERT PEM", "key": "KEY PEM", "clientCA": "CA PEM"}})
	s := get[corev1.Secret](t, objs, "Secret", echo+"-tls")
	if s.Type != corev1.SecretTypeTLS || string(s.Data["ca.crt"]) != "CA PEM" {
		t.Errorf("TLS Secret %v %v", s.Type, s.Data)
	}
	out, err := renderChartWith(echo, nil, map[string]any{"persistence": echoEncrypted, "auth": echoTokens}, nil, []string{"cert-manager.io/v1"})
	if err != nil {
		t.Fatal(err)
	}
	objs = decodeAll(t, out)
	crt := get[certificate](t, objs, "Certificate", echo+"-tls")
	if crt.Spec.SecretName != echo+"-tls" || crt.Spec.IssuerRef.Name != echo+"-ca" {
		t.Errorf("Certificate %+v", crt.Spec)
	}
}
