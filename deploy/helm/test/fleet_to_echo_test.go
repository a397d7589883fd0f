package helmtest

// Fleet's chart forwarding to Echo's chart, run for real: both rendered configs (TLS on
// every listener, mTLS on OTLP, Echo's token on OTLP) run by the real binaries on loopback
// ports, an agent pushes to Fleet over mTLS, and the cluster then answers from Echo's API.
// Echo accepts OTLP only over TLS with a client certificate of the CA and a token, so the
// batch arriving shows Fleet's otlp/echo exporter spoke TLS with the CA, the client
// certificate and the bearer token. Needs FLEET_BIN and ECHO_BIN (scripts/helm-test.sh).

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// relocate moves a rendered config onto loopback ports of the test (each chart port in
// `ports` gets a free one, the same across the config's files) and its files into place.
func relocate(t *testing.T, text string, ports map[string]int, chartPorts [][2]string, paths *strings.Replacer) string {
	t.Helper()
	text = paths.Replace(strings.ReplaceAll(text, "0.0.0.0", "127.0.0.1"))
	for _, p := range chartPorts {
		if _, ok := ports[p[0]]; !ok {
			ports[p[0]] = freePort(t)
		}
		text = strings.ReplaceAll(text, p[0], fmt.Sprintf("%s%d", p[1], ports[p[0]]))
	}
	return text
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFleetChartForwardsToEchoChartOverMTLS(t *testing.T) {
	fleetBin, echoBin := os.Getenv("FLEET_BIN"), os.Getenv("ECHO_BIN")
	if fleetBin == "" || echoBin == "" {
		t.Skip("FLEET_BIN or ECHO_BIN unset (scripts/helm-test.sh sets both)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()

	// One CA for both releases (Echo's certificate from Fleet's Issuer, as the charts
	// suggest), a certificate for each (server and client auth), an agent's.
	ca := issue(t, nil, 1, &x509.Certificate{Subject: pkix.Name{CommonName: "release CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature})
	leaf := func(serial int64, cn string) *testCert {
		return issue(t, ca, serial, &x509.Certificate{Subject: pkix.Name{CommonName: cn},
			DNSNames: []string{cn, "localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	}
	fleetCert, echoCert, agent := leaf(2, fleet), leaf(3, echo), leaf(4, "agent")
	tlsValues := func(c *testCert) map[string]any {
		return map[string]any{"cert": string(c.pem), "key": string(c.kpem), "clientCA": string(ca.pem)}
	}

	// Echo from its chart: a token for Fleet on OTLP and one for the operator on the API.
	const fleetToken, opsToken = "0123456789abcdef-fleet-to-echo", "0123456789abcdef-echo-operator"
	echoObjs := render(t, echo, nil, map[string]any{
		"persistence": echoEncrypted,
		"auth": map[string]any{
			"tokensFile": []any{
				map[string]any{"name": "fleet", "token_env": "ECHO_TOKEN_FLEET", "clusters": []any{"*"}},
				map[string]any{"name": "ops", "token_env": "ECHO_TOKEN_OPS", "clusters": []any{"*"}},
			},
			"tokenValues": map[string]any{"ECHO_TOKEN_FLEET": fleetToken, "ECHO_TOKEN_OPS": opsToken},
		},
		"tls": tlsValues(echoCert),
	})
	echoTLS := filepath.Join(dir, "echo-tls")
	writeFiles(t, echoTLS, map[string][]byte{"tls.crt": echoCert.pem, "tls.key": echoCert.kpem, "ca.crt": ca.pem})
	writeFiles(t, filepath.Join(dir, "echo-auth"), map[string][]byte{
		"tokens.yaml": get[corev1.Secret](t, echoObjs, "Secret", echo+"-auth").Data["tokens.yaml"]})
	echoPorts := map[string]int{}
	echoPaths := strings.NewReplacer("/var/lib/ingero-echo", filepath.Join(dir, "echo-data"),
		"/etc/ingero/auth", filepath.Join(dir, "echo-auth"), "/etc/ingero/tls", echoTLS)
	echoCM := get[corev1.ConfigMap](t, echoObjs, "ConfigMap", echo)
	var echoArgs []string
	for _, f := range []string{"echo.yaml", "overlay.yaml"} {
		text := relocate(t, echoCM.Data[f], echoPorts, [][2]string{{":4327", ":"}, {":4328", ":"}, {":8090", ":"},
			{":13134", ":"}, {"port: 8898", "port: "}}, echoPaths)
		writeFiles(t, dir, map[string][]byte{"echo-" + f: []byte(text)})
		echoArgs = append(echoArgs, "--config", filepath.Join(dir, "echo-"+f))
	}
	echoArgs = append(echoArgs, get[appsv1.StatefulSet](t, echoObjs, "StatefulSet", echo).Spec.Template.Spec.Containers[0].Args[4:]...)
	// The pod's environment: the token values' Secret.
	t.Setenv("ECHO_TOKEN_FLEET", fleetToken)
	t.Setenv("ECHO_TOKEN_OPS", opsToken)
	e := startProc(t, dir, "echo", echoBin, echoArgs...)
	waitPort(t, e, echoPorts[":4327"], 60*time.Second)
	waitPort(t, e, echoPorts[":8090"], 10*time.Second)

	// Fleet from its chart, forwarding to that Echo (its name in Echo's certificate).
	fleetObjs := render(t, fleet, nil, map[string]any{
		"tls": tlsValues(fleetCert),
		"echo": map[string]any{"enabled": true, "endpoint": fmt.Sprintf("localhost:%d", echoPorts[":4327"]),
			"token": map[string]any{"secretName": "echo-token-for-fleet"}},
		"config": map[string]any{"processors": map[string]any{"ingero": map[string]any{"push_interval": "1s"}}},
	})
	fleetTLS := filepath.Join(dir, "fleet-tls")
	writeFiles(t, fleetTLS, map[string][]byte{"tls.crt": fleetCert.pem, "tls.key": fleetCert.kpem, "ca.crt": ca.pem})
	fleetPorts := map[string]int{}
	fleetCM := get[corev1.ConfigMap](t, fleetObjs, "ConfigMap", fleet)
	var fleetArgs []string
	for _, f := range []string{"fleet.yaml", "overlay.yaml"} {
		text := relocate(t, fleetCM.Data[f], fleetPorts, chartPorts, strings.NewReplacer("/etc/ingero/tls", fleetTLS))
		writeFiles(t, dir, map[string][]byte{"fleet-" + f: []byte(text)})
		fleetArgs = append(fleetArgs, "--config", filepath.Join(dir, "fleet-"+f))
	}
	pod := get[appsv1.Deployment](t, fleetObjs, "Deployment", fleet).Spec.Template.Spec
	fleetArgs = append(fleetArgs, pod.Containers[0].Args[4:]...)
	if env := pod.Containers[0].Env; len(env) != 1 || env[0].Name != "INGERO_ECHO_TOKEN" {
		t.Fatalf("Fleet's pod env %+v: want INGERO_ECHO_TOKEN from the Secret", env)
	}
	t.Setenv("INGERO_ECHO_TOKEN", fleetToken)
	f := startProc(t, dir, "fleet", fleetBin, fleetArgs...)
	waitPort(t, f, fleetPorts[":4318"], 60*time.Second)
	failf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nfleet log:\n%s\necho log:\n%s", append(args, f.logs(), e.logs())...)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{agent.cert.Raw}, PrivateKey: agent.key}}}}}
	do := func(method, url, token string, body []byte) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			failf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	const cluster = "chart-echo"
	summary := func() (int, string) {
		return do("POST", fmt.Sprintf("https://127.0.0.1:%d/api/v1/tools/fleet.cluster.summary", echoPorts[":8090"]), opsToken,
			[]byte(fmt.Sprintf(`{"cluster_id":%q,"window":"10m"}`, cluster)))
	}
	if st, body := summary(); st != 404 {
		failf("Echo knows %s before any push: %d %s", cluster, st, body)
	}
	attr := func(k, v string) map[string]any {
		return map[string]any{"key": k, "value": map[string]any{"stringValue": v}}
	}
	for {
		for i := 0; i < 5; i++ {
			body, _ := json.Marshal(map[string]any{"resourceMetrics": []any{map[string]any{
				"resource": map[string]any{"attributes": []any{attr("ingero.cluster.id", cluster), attr("ingero.node.id", fmt.Sprintf("n%d", i))}},
				"scopeMetrics": []any{map[string]any{"metrics": []any{map[string]any{
					"name": "ingero.node.health_score", "unit": "1",
					"gauge": map[string]any{"dataPoints": []any{map[string]any{
						"timeUnixNano": fmt.Sprint(time.Now().UnixNano()), "asDouble": 0.9,
						"attributes": []any{attr("ingero.node.state", "active")}}}}}}}}}}})
			if st, b := do("POST", fmt.Sprintf("https://127.0.0.1:%d/v1/metrics?cluster_id=%s", fleetPorts[":4318"], cluster), "", body); st != 200 {
				failf("push to Fleet: %d %s", st, b)
			}
		}
		if st, body := summary(); st == 200 && strings.Contains(body, cluster) {
			break
		} else if st != 404 {
			failf("Echo's summary of %s: %d %s", cluster, st, body)
		}
		select {
		case <-ctx.Done():
			failf("the cluster did not reach Echo through Fleet's otlp/echo exporter within the deadline")
		case <-time.After(500 * time.Millisecond):
		}
	}
}
