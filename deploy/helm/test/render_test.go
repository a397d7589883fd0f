// Renders the charts in deploy/helm/ with Helm's own engine (the helm.sh/helm/v3 module the
// helm binary is built from) and decodes every object strictly into the real Kubernetes API
// types (k8s.io/api; the Prometheus Operator's types for the ServiceMonitor): an unknown or
// misspelled field, a wrong type or a duplicate key fails the test. Then checks what the
// charts promise: the security contexts, default-deny egress, the sharded front end, the
// agent's capability set, the Echo chart's encrypted-StorageClass guard.
//
// Run by scripts/helm-test.sh, which also runs `helm lint --strict`; FLEET_BIN (an
// ingero-fleet binary) lets the test validate the rendered Fleet config with Fleet itself.
package helmtest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// objects is one render, decoded: kind -> name -> typed object.
type objects map[string]map[string]any

func chartDir(name string) string { return filepath.Join("..", name) }

// renderChart renders a chart with its defaults, then each values file, then `set` merged
// over them, as `helm template` would (the release named after the chart, in namespace "ingero").
func renderChart(name string, files []string, set map[string]any, provider engine.ClientProvider) (map[string]string, error) {
	return renderChartWith(name, files, set, provider, nil)
}

// renderChartWith is renderChart on a cluster that also serves the API versions `apis`
// (e.g. cert-manager.io/v1).
func renderChartWith(name string, files []string, set map[string]any, provider engine.ClientProvider, apis []string) (map[string]string, error) {
	ch, err := loader.Load(chartDir(name))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	vals := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(filepath.Join(chartDir(name), f))
		if err != nil {
			return nil, err
		}
		vals = chartutil.CoalesceTables(v.AsMap(), vals)
	}
	vals = chartutil.CoalesceTables(set, vals)
	opts := chartutil.ReleaseOptions{Name: name, Namespace: "ingero", Revision: 1, IsInstall: true}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion.Version = "v1.31.0"
	caps.KubeVersion.Major = "1"
	caps.KubeVersion.Minor = "31"
	caps.APIVersions = append(append(chartutil.VersionSet{}, caps.APIVersions...), apis...)
	rv, err := chartutil.ToRenderValues(ch, vals, opts, caps)
	if err != nil {
		return nil, err
	}
	if provider != nil {
		return engine.RenderWithClientProvider(ch, rv, provider)
	}
	return engine.Render(ch, rv)
}

// strictDecode decodes one YAML document into out, refusing unknown fields and duplicate keys.
func strictDecode(doc []byte, out any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

func typed(kind string) (any, bool) {
	switch kind {
	case "ConfigMap":
		return &corev1.ConfigMap{}, true
	case "Secret":
		return &corev1.Secret{}, true
	case "Service":
		return &corev1.Service{}, true
	case "ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "Deployment":
		return &appsv1.Deployment{}, true
	case "StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "DaemonSet":
		return &appsv1.DaemonSet{}, true
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "Ingress":
		return &networkingv1.Ingress{}, true
	case "ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	case "Certificate":
		return &certificate{}, true
	case "Issuer":
		return &issuer{}, true
	}
	return nil, false
}

func decodeAll(t *testing.T, rendered map[string]string) objects {
	t.Helper()
	objs := objects{}
	for file, text := range rendered {
		if strings.HasSuffix(file, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(text, "\n---") {
			if strings.TrimSpace(doc) == "" || isComments(doc) {
				continue
			}
			var tm struct {
				metav1.TypeMeta `json:",inline"`
				Metadata        metav1.ObjectMeta `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", file, err, doc)
			}
			obj, ok := typed(tm.Kind)
			if !ok {
				t.Fatalf("%s: kind %q has no type in this test; add it", file, tm.Kind)
			}
			if err := strictDecode([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s %s does not decode strictly: %v\n%s", file, tm.Kind, tm.Metadata.Name, err, doc)
			}
			if objs[tm.Kind] == nil {
				objs[tm.Kind] = map[string]any{}
			}
			if _, dup := objs[tm.Kind][tm.Metadata.Name]; dup {
				t.Fatalf("two %s objects named %s", tm.Kind, tm.Metadata.Name)
			}
			objs[tm.Kind][tm.Metadata.Name] = obj
		}
	}
	return objs
}

func isComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func get[T any](t *testing.T, objs objects, kind, name string) *T {
	t.Helper()
	o, ok := objs[kind][name]
	if !ok {
		t.Fatalf("no %s named %s; have %v", kind, name, names(objs))
	}
	return o.(*T)
}

func names(objs objects) []string {
	var out []string
	for k, m := range objs {
		for n := range m {
			out = append(out, k+"/"+n)
		}
	}
	return out
}

func render(t *testing.T, chart string, files []string, set map[string]any) objects {
	t.Helper()
	out, err := renderChart(chart, files, set, nil)
	if err != nil {
		t.Fatalf("render %s %v: %v", chart, files, err)
	}
	return decodeAll(t, out)
}

func renderFails(t *testing.T, chart string, set map[string]any, want string) {
	t.Helper()
	_, err := renderChart(chart, nil, set, nil)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("render %s with %v: want an error containing %q, got %v", chart, set, want, err)
	}
}

// ---- shared checks ---------------------------------------------------------------------

func checkRestricted(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: pod runAsNonRoot not true", what)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: no RuntimeDefault seccomp profile", what)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: service account token mounted", what)
	}
	if pod.HostPID || pod.HostNetwork || pod.HostIPC {
		t.Errorf("%s: host namespaces", what)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("%s/%s: no securityContext", what, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s/%s: allowPrivilegeEscalation not false", what, c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s/%s: root filesystem writable", what, c.Name)
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s/%s: capabilities %+v, want drop [ALL] and none added", what, c.Name, sc.Capabilities)
		}
		if c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: no memory limit", what, c.Name)
		}
	}
}

func checkDefaultDenyEgress(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	hasEgress := false
	for _, p := range np.Spec.PolicyTypes {
		hasEgress = hasEgress || p == networkingv1.PolicyTypeEgress
	}
	if !hasEgress || len(np.Spec.Egress) != 0 {
		t.Errorf("NetworkPolicy %s: want Egress in policyTypes with no egress rule (deny all), got types %v rules %v",
			np.Name, np.Spec.PolicyTypes, np.Spec.Egress)
	}
}

func containerArgs(pod corev1.PodSpec) string { return strings.Join(pod.Containers[0].Args, " ") }

// validateFleetConfig runs `ingero-fleet --config fleet.yaml --config overlay.yaml validate`
// on a rendered ConfigMap (skipped when FLEET_BIN is unset: scripts/helm-test.sh sets it).
func validateFleetConfig(t *testing.T, cm *corev1.ConfigMap, extra []string) {
	t.Helper()
	bin := os.Getenv("FLEET_BIN")
	if bin == "" {
		t.Log("FLEET_BIN unset: the rendered config is not validated by ingero-fleet")
		return
	}
	dir := t.TempDir()
	// The TLS Secret's mount point, here a directory of test certificates.
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeTestTLS(t, tlsDir)
	args := []string{}
	for _, f := range []string{"fleet.yaml", "overlay.yaml"} {
		p := filepath.Join(dir, f)
		// Echo's CA and the client certificate for Echo (echo.tls.*) from the same files.
		text := cm.Data[f]
		for _, mount := range []string{"/etc/ingero/tls", "/etc/ingero/echo-ca", "/etc/ingero/echo-client"} {
			text = strings.ReplaceAll(text, mount, tlsDir)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", p)
	}
	args = append(append(args, extra...), "validate")
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ingero-fleet %v: %v\n%s\nfleet.yaml:\n%s\noverlay.yaml:\n%s", args, err, out, cm.Data["fleet.yaml"], cm.Data["overlay.yaml"])
	}
}

// The cert-manager objects the charts make, as far as they use them (this module does not
// import cert-manager's API types): decoded strictly, so a misspelled field still fails.
type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

type certificate struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		IsCA        bool     `json:"isCA,omitempty"`
		CommonName  string   `json:"commonName,omitempty"`
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		IPAddresses []string `json:"ipAddresses,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef issuerRef `json:"issuerRef"`
	} `json:"spec"`
}

type issuer struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// writeTestTLS writes a self-signed certificate as tls.crt, tls.key and ca.crt into dir (the
// files a chart's TLS Secret mounts), for validating rendered configs that name them.
func writeTestTLS(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "chart-test"},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	for name, data := range map[string][]byte{
		"tls.crt": cert,
		"ca.crt":  cert,
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
