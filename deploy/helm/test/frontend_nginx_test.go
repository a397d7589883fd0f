package helmtest

// The sharded front end's rendered nginx.conf, run by a real nginx in front of two real
// ingero-fleet replicas that serve the chart's TLS (mTLS on the agent listeners): agents
// push and poll through nginx over TLS with their client certificate; nginx reaches each
// replica over TLS, checking its certificate (the headless Service's wildcard name) and
// showing the release's certificate as its client certificate. Needs FLEET_BIN (set by
// scripts/helm-test.sh) and nginx (Debian package nginx). Bounded: the whole exchange has
// a deadline, every request a timeout, and the processes end with the test (procs_test.go).

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func nginxBin() string {
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// replicaPorts are the loopback ports one replica's listeners get in place of the chart's.
type replicaPorts map[string]int

// chartPorts: the chart's port (as it appears in the rendered configs) -> the prefix kept.
var chartPorts = [][2]string{{":4317", ":"}, {":4318", ":"}, {":8080", ":"}, {":8081", ":"},
	{":13133", ":"}, {":8889", ":"}, {"port: 8888", "port: "}}

func TestFleetFrontEndSpeaksTLSToTheReplicas(t *testing.T) {
	bin := os.Getenv("FLEET_BIN")
	if bin == "" {
		t.Skip("FLEET_BIN unset: no replicas to run (scripts/helm-test.sh sets it)")
	}
	ngx := nginxBin()
	if ngx == "" {
		t.Fatal("nginx is required (Debian package nginx; scripts/test-all.sh installs it)")
	}
	// The whole exchange through nginx gets this long; each request 5 s of it at most.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The release's CA, its certificate (server and client auth, the Service names and the
	// replicas' wildcard, as the chart's cert-manager Certificate has) and an agent's.
	ca := issue(t, nil, 1, &x509.Certificate{Subject: pkix.Name{CommonName: "release CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature})
	releaseCert := func(serial int64) *testCert {
		return issue(t, ca, serial, &x509.Certificate{Subject: pkix.Name{CommonName: fleet},
			DNSNames:    []string{fleet, "*." + fleet + "-replicas", "*." + fleet + "-replicas.ingero.svc", "localhost"},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	}
	release := releaseCert(2)
	agent := issue(t, ca, 3, &x509.Certificate{Subject: pkix.Name{CommonName: "agent"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	objs := render(t, fleet, nil, map[string]any{
		"sharding": map[string]any{"enabled": true, "replicas": 2},
		"tls": map[string]any{"enabled": true, "cert": string(release.pem), "key": string(release.kpem),
			"clientCA": string(ca.pem)},
		"config": map[string]any{"processors": map[string]any{"ingero": map[string]any{"push_interval": "1s"}}},
	})
	// Not t.TempDir(): its parent is private, and nginx's workers run as another user.
	dir, err := os.MkdirTemp("", "front-end-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The Secret's files. Readable by others here: nginx reads the certificate and key at
	// each connection in its workers, which run as another user when the test runs as root
	// (in the pod nginx runs as one user, the files' group by fsGroup).
	writeTLS := func(c *testCert) {
		for name, data := range map[string][]byte{"tls.crt": c.pem, "tls.key": c.kpem, "ca.crt": ca.pem} {
			tmp := filepath.Join(tlsDir, "."+name)
			if err := os.WriteFile(tmp, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(tlsDir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeTLS(release)

	// Two replicas: the rendered config and TLS overlay, on loopback ports of their own.
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", fleet)
	var replicas []replicaPorts
	for i := 0; i < 2; i++ {
		ports := replicaPorts{}
		var args []string
		for _, f := range []string{"fleet.yaml", "overlay.yaml"} {
			text := strings.ReplaceAll(cm.Data[f], "/etc/ingero/tls", tlsDir)
			text = strings.ReplaceAll(text, "0.0.0.0", "127.0.0.1")
			for _, p := range chartPorts {
				if _, ok := ports[p[0]]; !ok {
					ports[p[0]] = freePort(t)
				}
				text = strings.ReplaceAll(text, p[0], fmt.Sprintf("%s%d", p[1], ports[p[0]]))
			}
			path := filepath.Join(dir, fmt.Sprintf("replica-%d-%s", i, f))
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--config", path)
		}
		p := startProc(t, dir, fmt.Sprintf("replica-%d", i), bin, args...)
		waitPort(t, p, ports[":4318"], 60*time.Second)
		waitPort(t, p, ports[":8080"], 10*time.Second)
		replicas = append(replicas, ports)
	}

	// nginx with the rendered front-end config: the replicas' names resolve to the test's
	// ports, the Secret's mount point is the test's directory.
	conf := get[corev1.ConfigMap](t, objs, "ConfigMap", fleet+"-front-end").Data["nginx.conf"]
	headless := fleet + "-replicas"
	for i, r := range replicas {
		for port, ours := range map[int]int{4318: r[":4318"], 8080: r[":8080"]} {
			name := fmt.Sprintf("server %s-%d.%s:%d;", fleet, i, headless, port)
			if !strings.Contains(conf, name) {
				t.Fatalf("nginx.conf names no %s:\n%s", name, conf)
			}
			conf = strings.ReplaceAll(conf, name, fmt.Sprintf("server 127.0.0.1:%d;", ours))
		}
		for _, want := range []string{
			fmt.Sprintf("proxy_pass https://%s-%d-otlp;", fleet, i),
			fmt.Sprintf("proxy_pass https://%s-%d-api;", fleet, i),
			fmt.Sprintf("proxy_ssl_name %s-%d.%s.ingero.svc;", fleet, i, headless),
		} {
			if !strings.Contains(conf, want) {
				t.Fatalf("nginx.conf lacks %q:\n%s", want, conf)
			}
		}
	}
	pubOTLP, pubAPI := freePort(t), freePort(t)
	// In this order: the test's directory may be under /tmp.
	for _, r := range [][2]string{
		{"/tmp/", dir + "/"},
		{"/run/nginx/", dir + "/"},
		{"/etc/nginx/tls/", tlsDir + "/"},
		{"listen 4318 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", pubOTLP)},
		{"listen 8080 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", pubAPI)},
	} {
		old, repl := r[0], r[1]
		if !strings.Contains(conf, old) {
			t.Fatalf("nginx.conf lacks %q:\n%s", old, conf)
		}
		conf = strings.ReplaceAll(conf, old, repl)
	}
	conf = strings.Replace(conf, "worker_connections 16384;", "worker_connections 1024;", 1)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// -e: nginx's own early errors to stderr, not the packaged log path.
	base := []string{"-e", "stderr", "-p", dir, "-c", confPath}
	if out, err := runBounded(20*time.Second, ngx, append(base, "-t")...); err != nil {
		t.Fatalf("nginx -t: %v\n%s\n%s", err, out, conf)
	}
	n := startProc(t, dir, "nginx", ngx, append(base, "-g", "daemon off;")...)
	waitPort(t, n, pubOTLP, 30*time.Second)
	waitPort(t, n, pubAPI, 10*time.Second)
	failf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nnginx log:\n%s\nreplica 0 log:\n%s", append(args, n.logs(), readLog(dir, "replica-0"))...)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := func(withCert bool) *http.Client {
		cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
		if withCert {
			cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{agent.cert.Raw}, PrivateKey: agent.key}}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	agentClient, anonymous := client(true), client(false)
	do := func(c *http.Client, method, url string, body []byte) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b), err
	}
	pushBody := func(cluster, node string, score float64) []byte {
		attr := func(k, v string) map[string]any {
			return map[string]any{"key": k, "value": map[string]any{"stringValue": v}}
		}
		body, _ := json.Marshal(map[string]any{"resourceMetrics": []any{map[string]any{
			"resource": map[string]any{"attributes": []any{attr("ingero.cluster.id", cluster), attr("ingero.node.id", node)}},
			"scopeMetrics": []any{map[string]any{"metrics": []any{map[string]any{
				"name": "ingero.node.health_score", "unit": "1",
				"gauge": map[string]any{"dataPoints": []any{map[string]any{
					"timeUnixNano": fmt.Sprint(time.Now().UnixNano()), "asDouble": score,
					"attributes": []any{attr("ingero.node.state", "active")}}}}}}}}}}})
		return body
	}

	// Every cluster's agents push through nginx until each cluster has a threshold there.
	// Where a cluster lands depends on the ring's member names (socket paths in the test's
	// random directory): with 16 clusters, all on one replica has odds of 2 in 65,536.
	var clusters []string
	for i := 0; i < 16; i++ {
		clusters = append(clusters, fmt.Sprintf("ring-%c", 'a'+i))
	}
	quorum := map[string]bool{}
	for len(quorum) < len(clusters) {
		if ctx.Err() != nil {
			failf("clusters with a threshold through nginx within the deadline: %v of %v", quorum, clusters)
		}
		for _, c := range clusters {
			for i := 0; i < 6; i++ {
				url := fmt.Sprintf("https://127.0.0.1:%d/v1/metrics?cluster_id=%s", pubOTLP, c)
				st, body, err := do(agentClient, "POST", url, pushBody(c, fmt.Sprintf("%s-node-%d", c, i), 0.9+0.01*float64(i%3)))
				if err != nil || st != 200 {
					failf("push of %s through nginx: %d %s %v", c, st, body, err)
				}
			}
			st, body, err := do(agentClient, "GET", fmt.Sprintf("https://127.0.0.1:%d/api/v1/threshold?cluster_id=%s", pubAPI, c), nil)
			if err != nil || st != 200 {
				failf("threshold poll of %s through nginx: %d %s %v", c, st, body, err)
			}
			var got struct {
				QuorumMet bool `json:"quorum_met"`
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				failf("threshold answer of %s: %v: %s", c, err, body)
			}
			if got.QuorumMet {
				quorum[c] = true
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}

	// The ring: each cluster's series are on exactly one replica (its pushes and polls all
	// reached that one), and both replicas got clusters. Read from each replica's own
	// exporter over TLS, not through nginx.
	owners := map[string][]int{}
	for i, r := range replicas {
		st, body, err := do(anonymous, "GET", fmt.Sprintf("https://127.0.0.1:%d/metrics", r[":8889"]), nil)
		if err != nil || st != 200 {
			failf("replica %d exporter: %d %v", i, st, err)
		}
		for _, c := range clusters {
			if strings.Contains(body, fmt.Sprintf(`ingero_fleet_threshold{cluster_id="%s"`, c)) {
				owners[c] = append(owners[c], i)
			}
		}
	}
	perReplica := map[int]int{}
	for _, c := range clusters {
		if len(owners[c]) != 1 {
			t.Errorf("cluster %s has a threshold on replicas %v, want exactly one", c, owners[c])
		} else {
			perReplica[owners[c][0]]++
		}
	}
	if len(perReplica) != 2 {
		t.Errorf("clusters per replica %v: want both replicas on the ring", perReplica)
	}

	// Without a client certificate nginx refuses the push and the poll; /healthz (the
	// probes) answers.
	for _, url := range []string{
		fmt.Sprintf("https://127.0.0.1:%d/v1/metrics?cluster_id=ring-a", pubOTLP),
		fmt.Sprintf("https://127.0.0.1:%d/api/v1/threshold?cluster_id=ring-a", pubAPI),
	} {
		method, body := "GET", []byte(nil)
		if strings.Contains(url, "/v1/metrics") {
			method, body = "POST", []byte("{}")
		}
		if st, _, err := do(anonymous, method, url, body); err != nil || st != 403 {
			t.Errorf("%s %s without a client certificate: %d %v, want 403", method, url, st, err)
		}
	}
	if st, _, err := do(anonymous, "GET", fmt.Sprintf("https://127.0.0.1:%d/healthz", pubOTLP), nil); err != nil || st != 200 {
		t.Errorf("/healthz without a client certificate: %d %v, want 200", st, err)
	}
	// A renewed certificate (cert-manager rewrites the Secret's files) is what nginx shows
	// on the next connection, without a restart, and pushes keep going through.
	served := func() *big.Int {
		d := &net.Dialer{Timeout: 5 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", fmt.Sprintf("127.0.0.1:%d", pubOTLP), &tls.Config{
			RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12,
			Certificates: []tls.Certificate{{Certificate: [][]byte{agent.cert.Raw}, PrivateKey: agent.key}}})
		if err != nil {
			failf("TLS to nginx: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if got := served(); got.Int64() != 2 {
		t.Errorf("nginx shows certificate serial %v, want the release's 2", got)
	}
	writeTLS(releaseCert(5))
	if got := served(); got.Int64() != 5 {
		t.Errorf("after the Secret's renewal nginx shows serial %v, want the renewed 5", got)
	}
	for _, c := range clusters {
		url := fmt.Sprintf("https://127.0.0.1:%d/v1/metrics?cluster_id=%s", pubOTLP, c)
		if st, body, err := do(client(true), "POST", url, pushBody(c, c+"-node-0", 0.9)); err != nil || st != 200 {
			failf("push of %s after the renewal: %d %s %v", c, st, body, err)
		}
	}

	// Plaintext to nginx's TLS port is answered with an error, never proxied.
	plain := &http.Client{Timeout: 5 * time.Second}
	if st, _, err := do(plain, "GET", fmt.Sprintf("http://127.0.0.1:%d/api/v1/threshold?cluster_id=ring-a", pubAPI), nil); err == nil && st != 400 {
		t.Errorf("plaintext request to the TLS port: %d, want 400 or a refused handshake", st)
	}
}

func readLog(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name+".log"))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}
