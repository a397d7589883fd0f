package helmtest

// The agent chart's rendered arguments run by the real ingero-agent against the real
// ingero-fleet run from the Fleet chart's rendered config, on loopback: three agents (the
// synthetic signal source, so no GPU, eBPF or root is needed) push to Fleet until each
// classifies against Fleet's threshold (detection mode "fleet" and a threshold on its own
// /metrics), and each agent's query API (api.enabled) answers with the chart's TLS and token. Two modes: the defaults (mTLS with the CA, client certificate and key from
// the agent's Secret, plus a bearer token from a Secret, against Fleet's mTLS and token
// auth), and plaintext as the explicit value in both charts. The Secret files are written
// with the modes the rendered volumes give them, so a mode the agent refuses for its key
// fails the run (and an agent given the key at 0440 is checked to exit, refusing it). Needs FLEET_BIN and AGENT_BIN (scripts/helm-test.sh sets both); the agent
// has no dry-run mode, so starting it is its config check (invalid arguments exit with
// status 2 at once).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// writeSecretVolume writes a Secret volume's items (all the Secret's keys when it lists
// none) into dir with the volume's defaultMode, as the kubelet would.
func writeSecretVolume(t *testing.T, dir string, v *corev1.SecretVolumeSource, data map[string][]byte) {
	t.Helper()
	if v == nil {
		t.Fatalf("the DaemonSet mounts no Secret for %s", filepath.Base(dir))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	mode := os.FileMode(0o644) // the kubelet's default
	if v.DefaultMode != nil {
		mode = os.FileMode(*v.DefaultMode)
	}
	items := v.Items
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			t.Fatalf("Secret %s has no key %s", v.SecretName, it.Key)
		}
		p := filepath.Join(dir, it.Path)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

var fleetModeLine = regexp.MustCompile(`(?m)^ingero_agent_detection_mode\{mode="fleet"\} 1$`)
var thresholdLine = regexp.MustCompile(`(?m)^ingero_agent_threshold ([0-9.eE+-]+)$`)

func TestAgentChartReachesFleetChartThreshold(t *testing.T) {
	fleetBin, agentBin := os.Getenv("FLEET_BIN"), os.Getenv("AGENT_BIN")
	if fleetBin == "" || agentBin == "" {
		t.Skip("FLEET_BIN or AGENT_BIN unset (scripts/helm-test.sh sets both)")
	}
	t.Run("mtls-and-token", func(t *testing.T) { runAgentsAgainstFleet(t, fleetBin, agentBin, true) })
	t.Run("explicit-plaintext", func(t *testing.T) { runAgentsAgainstFleet(t, fleetBin, agentBin, false) })
}

func runAgentsAgainstFleet(t *testing.T, fleetBin, agentBin string, secure bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	const cluster, token = "chart-agents", "0123456789abcdef-agents-token"

	// Fleet from its chart: mTLS and a token scoped to the cluster, or explicit plaintext;
	// one-second ticks and the smallest quorum, so three agents reach a threshold quickly.
	ca := issue(t, nil, 1, &x509.Certificate{Subject: pkix.Name{CommonName: "fleet release CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature})
	fleetCert := issue(t, ca, 2, &x509.Certificate{Subject: pkix.Name{CommonName: fleet},
		DNSNames: []string{fleet, "localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	agentCert := issue(t, ca, 3, &x509.Certificate{Subject: pkix.Name{CommonName: agent},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	fleetVals := map[string]any{
		"config": map[string]any{"processors": map[string]any{"ingero": map[string]any{
			"push_interval": "1s", "quorum": map[string]any{"statistical_min": 3}}}},
	}
	if secure {
		fleetVals["tls"] = map[string]any{"cert": string(fleetCert.pem), "key": string(fleetCert.kpem), "clientCA": string(ca.pem)}
		fleetVals["auth"] = map[string]any{
			"enabled":     true,
			"tokensFile":  []any{map[string]any{"name": "agents", "token_env": "FLEET_TOKEN_AGENTS", "clusters": []any{cluster}}},
			"tokenValues": map[string]any{"FLEET_TOKEN_AGENTS": token},
		}
	} else {
		fleetVals["tls"] = map[string]any{"enabled": false}
	}
	fleetObjs := render(t, fleet, nil, fleetVals)
	fleetTLS, fleetAuth := filepath.Join(dir, "fleet-tls"), filepath.Join(dir, "fleet-auth")
	writeFiles(t, fleetTLS, map[string][]byte{"tls.crt": fleetCert.pem, "tls.key": fleetCert.kpem, "ca.crt": ca.pem})
	if secure {
		writeFiles(t, fleetAuth, map[string][]byte{
			"tokens.yaml": get[corev1.Secret](t, fleetObjs, "Secret", fleet+"-auth").Data["tokens.yaml"]})
		t.Setenv("FLEET_TOKEN_AGENTS", token)
	}
	fleetPorts := map[string]int{}
	fleetCM := get[corev1.ConfigMap](t, fleetObjs, "ConfigMap", fleet)
	var fleetArgs []string
	for _, f := range []string{"fleet.yaml", "overlay.yaml"} {
		text := relocate(t, fleetCM.Data[f], fleetPorts, chartPorts,
			strings.NewReplacer("/etc/ingero/tls", fleetTLS, "/etc/ingero/auth", fleetAuth))
		writeFiles(t, dir, map[string][]byte{"fleet-" + f: []byte(text)})
		fleetArgs = append(fleetArgs, "--config", filepath.Join(dir, "fleet-"+f))
	}
	fleetArgs = append(fleetArgs, get[appsv1.Deployment](t, fleetObjs, "Deployment", fleet).Spec.Template.Spec.Containers[0].Args[4:]...)
	f := startProc(t, dir, "fleet", fleetBin, fleetArgs...)
	waitPort(t, f, fleetPorts[":4318"], 60*time.Second)

	// The agents from their chart, pointed at that Fleet (the name in its certificate).
	agentFleet := map[string]any{
		"clusterId": cluster, "pushInterval": "1s",
		// No cloud metadata probe: the test reaches only loopback.
		"provider": "none",
	}
	// The query API on too: its chart defaults (TLS with mTLS) plus a token, or explicit
	// plaintext.
	const apiToken = "api-token-0123456789abcdef"
	apiVals := map[string]any{"enabled": true}
	if secure {
		agentFleet["endpoint"] = fmt.Sprintf("https://localhost:%d", fleetPorts[":4318"])
		agentFleet["tls"] = map[string]any{"existingSecret": "agent-mtls"}
		agentFleet["token"] = map[string]any{"enabled": true, "existingSecret": "agent-token"}
		apiVals["tls"] = map[string]any{"existingSecret": "agent-api-tls"}
		apiVals["token"] = map[string]any{"enabled": true, "existingSecret": "agent-api-token"}
	} else {
		agentFleet["endpoint"] = fmt.Sprintf("http://127.0.0.1:%d", fleetPorts[":4318"])
		agentFleet["tls"] = map[string]any{"enabled": false}
		apiVals["tls"] = map[string]any{"enabled": false}
	}
	agentObjs := render(t, agent, nil, map[string]any{"fleet": agentFleet, "api": apiVals})
	pod := get[appsv1.DaemonSet](t, agentObjs, "DaemonSet", agent).Spec.Template.Spec
	agentTLS, agentToken := filepath.Join(dir, "agent-tls"), filepath.Join(dir, "agent-token")
	apiTLS, apiTokenDir := filepath.Join(dir, "agent-api-tls"), filepath.Join(dir, "agent-api-token")
	if secure {
		writeSecretVolume(t, agentTLS, tlsVolume(pod, "tls"), map[string][]byte{
			"ca.crt": ca.pem, "tls.crt": agentCert.pem, "tls.key": agentCert.kpem})
		writeSecretVolume(t, agentToken, tlsVolume(pod, "token"), map[string][]byte{"token": []byte(token + "\n")})
		// The API's server certificate from the same CA (as the chart's cert-manager mode
		// gives), whose ca.crt checks client certificates.
		apiCert := issue(t, ca, 4, &x509.Certificate{Subject: pkix.Name{CommonName: agent + " api"},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		writeSecretVolume(t, apiTLS, tlsVolume(pod, "api-tls"), map[string][]byte{
			"ca.crt": ca.pem, "tls.crt": apiCert.pem, "tls.key": apiCert.kpem})
		writeSecretVolume(t, apiTokenDir, tlsVolume(pod, "api-token"), map[string][]byte{"token": []byte(apiToken + "\n")})
	} else if tlsVolume(pod, "tls") != nil || tlsVolume(pod, "token") != nil || tlsVolume(pod, "api-tls") != nil {
		t.Fatalf("plaintext agent mounts a certificate or token: %+v", pod.Volumes)
	}
	args := pod.Containers[0].Args
	joined := strings.Join(args, " ")
	if secure != strings.Contains(joined, "--fleet-tls-key=") || secure != strings.Contains(joined, "--fleet-token-file=") {
		t.Fatalf("agent args %q (mTLS and token expected: %v)", joined, secure)
	}

	const n = 3
	metrics := make([]int, n)
	apiPorts := make([]int, n)
	agents := make([]*proc, n)
	for i := range agents {
		metrics[i], apiPorts[i] = freePort(t), freePort(t)
		state := filepath.Join(dir, fmt.Sprintf("state-%d", i))
		fix := strings.NewReplacer("$(NODE_NAME)", fmt.Sprintf("node-%d", i),
			"0.0.0.0:9465", fmt.Sprintf("127.0.0.1:%d", metrics[i]),
			"0.0.0.0:8080", fmt.Sprintf("127.0.0.1:%d", apiPorts[i]),
			"/etc/ingero/api-tls", apiTLS, "/etc/ingero/api-token", apiTokenDir,
			"/etc/ingero/tls", agentTLS, "/etc/ingero/token", agentToken, "/var/lib/ingero-agent", state)
		var a []string
		for _, arg := range args {
			a = append(a, fix.Replace(arg))
		}
		// The synthetic source in place of the probes; one calibration sample.
		a = append(a, "--synthetic", "--warmup-samples", "1")
		agents[i] = startProc(t, dir, fmt.Sprintf("agent-%d", i), agentBin, a...)
	}
	allLogs := func() string {
		var b strings.Builder
		for _, p := range append([]*proc{f}, agents...) {
			fmt.Fprintf(&b, "--- %s:\n%s\n", p.name, p.logs())
		}
		return b.String()
	}
	client := &http.Client{Timeout: 2 * time.Second}
	scrape := func(port int) string {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
		resp, err := client.Do(req)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return string(b)
	}
	for {
		done := 0
		for i, p := range agents {
			select {
			case <-p.exited:
				t.Fatalf("%s exited (its arguments or certificate refused?):\n%s", p.name, allLogs())
			default:
			}
			if m := scrape(metrics[i]); fleetModeLine.MatchString(m) && thresholdLine.MatchString(m) {
				done++
			}
		}
		if done == n {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the agents did not all classify against Fleet's threshold within the deadline:\n%s", allLogs())
		case <-time.After(500 * time.Millisecond):
		}
	}
	// Each agent's query API answers with what the chart gave it: over TLS with a client
	// certificate of the CA and the token in the secure mode (and 401 without the token, a
	// refused handshake without the certificate), over plain HTTP otherwise.
	apiGet := func(port int, withCert bool, bearer string) (int, error) {
		scheme, tr := "http", &http.Transport{}
		if secure {
			roots := x509.NewCertPool()
			roots.AddCert(ca.cert)
			cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}
			if withCert {
				cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{agentCert.cert.Raw}, PrivateKey: agentCert.key}}
			}
			scheme, tr = "https", &http.Transport{TLSClientConfig: cfg}
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: tr}
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s://127.0.0.1:%d/api/v1/time", scheme, port), nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for i, port := range apiPorts {
		if st, err := apiGet(port, true, apiToken); err != nil || st != http.StatusOK {
			t.Errorf("agent-%d API with what the chart gave: %d %v, want 200\n%s", i, st, err, allLogs())
		}
	}
	if !secure {
		return
	}
	if st, err := apiGet(apiPorts[0], true, ""); err != nil || st != http.StatusUnauthorized {
		t.Errorf("API without the token: %d %v, want 401", st, err)
	}
	if st, err := apiGet(apiPorts[0], false, apiToken); err == nil {
		t.Errorf("API answered %d without a client certificate", st)
	}
	// The mode matters: the same arguments with the key readable by the group (what a
	// defaultMode of 0440 would give) are refused at start.
	loose := filepath.Join(dir, "agent-tls-loose")
	writeFiles(t, loose, map[string][]byte{"ca.crt": ca.pem, "tls.crt": agentCert.pem, "tls.key": agentCert.kpem})
	if err := os.Chmod(filepath.Join(loose, "tls.key"), 0o440); err != nil {
		t.Fatal(err)
	}
	fix := strings.NewReplacer("$(NODE_NAME)", "node-loose", "0.0.0.0:9465", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"/etc/ingero/tls", loose, "/etc/ingero/token", agentToken, "/var/lib/ingero-agent", filepath.Join(dir, "state-loose"))
	var a []string
	for _, arg := range args {
		a = append(a, fix.Replace(arg))
	}
	lp := startProc(t, dir, "agent-loose", agentBin, append(a, "--synthetic", "--warmup-samples", "1")...)
	select {
	case <-lp.exited:
		if !strings.Contains(lp.logs(), "readable by group or others") {
			t.Errorf("the agent with a 0440 key exited, but not for its mode:\n%s", lp.logs())
		}
	case <-time.After(20 * time.Second):
		t.Errorf("the agent with a 0440 key still runs after 20 s:\n%s", lp.logs())
	}
	// The agents got through only with what the chart gave them: this Fleet refuses a push
	// without a client certificate (in the handshake) and one without the token (401).
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	push := func(withCert bool) (int, error) {
		cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
		if withCert {
			cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{agentCert.cert.Raw}, PrivateKey: agentCert.key}}
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		req, _ := http.NewRequestWithContext(ctx, "POST",
			fmt.Sprintf("https://127.0.0.1:%d/v1/metrics?cluster_id=%s", fleetPorts[":4318"], cluster), strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if st, err := push(false); err == nil {
		t.Errorf("Fleet answered %d to a push without a client certificate", st)
	}
	if st, err := push(true); err != nil || st != http.StatusUnauthorized {
		t.Errorf("push with the client certificate and no token: %d %v, want 401", st, err)
	}
}
