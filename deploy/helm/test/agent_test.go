package helmtest

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

const agent = "ingero-agent"

// The agent's container: uid 0 with exactly the capabilities the eBPF probes need, nothing
// else of root's; the host's PID namespace and nothing more of the host.
func checkAgentPod(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	if !pod.HostPID || pod.HostNetwork || pod.HostIPC {
		t.Errorf("hostPID %v hostNetwork %v hostIPC %v: want hostPID only", pod.HostPID, pod.HostNetwork, pod.HostIPC)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("service account token mounted")
	}
	sc := pod.Containers[0].SecurityContext
	if sc.Privileged == nil || *sc.Privileged {
		t.Errorf("privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("root filesystem writable")
	}
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	slices.Sort(add)
	if !slices.Equal(add, []string{"BPF", "PERFMON", "SYS_PTRACE", "SYS_RESOURCE"}) || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("capabilities %+v: want drop ALL, add BPF PERFMON SYS_PTRACE SYS_RESOURCE", sc.Capabilities)
	}
	if slices.Contains(add, "SYS_ADMIN") {
		t.Errorf("SYS_ADMIN added")
	}
	if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("nodeSelector %v: not GPU nodes", pod.NodeSelector)
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil && !strings.HasPrefix(v.HostPath.Path, "/var/lib/ingero-agent") && v.HostPath.Path != "/run/ingero-agent" {
			t.Errorf("hostPath %s beyond the agent's own directories", v.HostPath.Path)
		}
	}
}

// egressRule is one egress rule as the test compares it: "TCP/4318,TCP/8080 to <peers>".
func egressRules(np *networkingv1.NetworkPolicy) []string {
	var out []string
	for _, r := range np.Spec.Egress {
		var ports []string
		for _, p := range r.Ports {
			ports = append(ports, string(*p.Protocol)+"/"+p.Port.String())
		}
		var to []string
		for _, peer := range r.To {
			switch {
			case peer.IPBlock != nil:
				to = append(to, "cidr:"+peer.IPBlock.CIDR)
			case peer.PodSelector != nil && peer.PodSelector.MatchLabels["k8s-app"] == "kube-dns":
				to = append(to, "kube-dns")
			default:
				to = append(to, "selector")
			}
		}
		if len(to) == 0 {
			to = []string{"any"}
		}
		out = append(out, strings.Join(ports, ",")+" to "+strings.Join(to, ","))
	}
	return out
}

// checkAgentNetworkPolicy: the policy selects the agent's pods, admits only the metrics
// port, and every egress rule is port-bound (no rule opens all destinations and ports).
func checkAgentNetworkPolicy(t *testing.T, objs objects, pod corev1.PodSpec, wantEgress []string) {
	t.Helper()
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", agent)
	ds := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent)
	for k, v := range ds.Spec.Selector.MatchLabels {
		if np.Spec.PodSelector.MatchLabels[k] != v {
			t.Errorf("NetworkPolicy selects %v, not the DaemonSet's pods %v", np.Spec.PodSelector.MatchLabels, ds.Spec.Selector.MatchLabels)
		}
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v, want Ingress and Egress", np.Spec.PolicyTypes)
	}
	// One ingress rule per container port: metrics, then the query API's when it is on.
	var want []int
	for _, p := range pod.Containers[0].Ports {
		want = append(want, int(p.ContainerPort))
	}
	var got []int
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) != 1 {
			t.Errorf("ingress rule %v: want one port", r)
			continue
		}
		got = append(got, r.Ports[0].Port.IntValue())
	}
	if !slices.Equal(got, want) {
		t.Errorf("ingress ports %v: want exactly the container's ports %v (metrics, then the API's)", got, want)
	}
	for _, r := range np.Spec.Egress {
		if len(r.Ports) == 0 {
			t.Errorf("egress rule %v has no ports: it opens every port", r)
		}
	}
	if got := egressRules(np); !slices.Equal(got, wantEgress) {
		t.Errorf("egress rules\n got %q\nwant %q", got, wantEgress)
	}
}

// agentDefaults is what an install without cert-manager needs beyond the defaults: the
// Secret with the client certificate (mTLS to Fleet is the default).
var agentDefaults = []string{"ci/default-values.yaml"}

// tlsVolume is the agent's Secret volume named name, or nil.
func tlsVolume(pod corev1.PodSpec, name string) *corev1.SecretVolumeSource {
	for _, v := range pod.Volumes {
		if v.Name == name {
			return v.Secret
		}
	}
	return nil
}

// checkOwnerOnly: every Secret volume of the agent is mounted owner-only, since the agent
// refuses a key readable by group or others.
func checkOwnerOnly(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
			t.Errorf("secret volume %s mode %v: the agent refuses a key readable by group or others", v.Name, v.Secret.DefaultMode)
		}
		for _, it := range v.Secret.Items {
			if it.Mode != nil {
				t.Errorf("secret volume %s item %s overrides the mode (%o)", v.Name, it.Key, *it.Mode)
			}
		}
	}
}

// The defaults are mTLS to Fleet over https: the CA, the client certificate and its key
// from the Secret, mounted owner-only.
func TestAgentDefaults(t *testing.T) {
	objs := render(t, agent, agentDefaults, nil)
	ds := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent)
	pod := ds.Spec.Template.Spec
	checkAgentPod(t, pod)
	checkOwnerOnly(t, pod)
	// Fleet's OTLP/HTTP port from fleet.endpoint, DNS, and the metadata service that
	// --fleet-provider=auto (the default) asks.
	checkAgentNetworkPolicy(t, objs, pod, []string{
		"TCP/4318 to any", "UDP/53,TCP/53 to kube-dns", "TCP/80 to cidr:169.254.169.254/32",
	})
	args := containerArgs(pod)
	for _, want := range []string{"--fleet-endpoint=https://ingero-fleet:4318", "--fleet-cluster-id=default", "--fleet-node-id=$(NODE_NAME)",
		"--metrics-listen=0.0.0.0:9465", "--fleet-tls-ca=/etc/ingero/tls/ca.crt", "--fleet-tls-cert=/etc/ingero/tls/tls.crt",
		"--fleet-tls-key=/etc/ingero/tls/tls.key", "--fleet-persist-path=/var/lib/ingero-agent/health-baseline.json"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--remediate") || strings.Contains(args, "--fleet-insecure") || strings.Contains(args, "--fleet-token-file") {
		t.Errorf("defaults turn on remediation, plaintext or a token: %q", args)
	}
	v := tlsVolume(pod, "tls")
	if v == nil || v.SecretName != "agent-tls" {
		t.Fatalf("tls volume %+v: want the Secret agent-tls", v)
	}
	var items []string
	for _, it := range v.Items {
		items = append(items, it.Key+"->"+it.Path)
	}
	if !slices.Equal(items, []string{"ca.crt->ca.crt", "tls.crt->tls.crt", "tls.key->tls.key"}) {
		t.Errorf("tls volume items %v", items)
	}
	if len(objs["Certificate"]) != 0 {
		t.Errorf("a Certificate with a Secret given and no cert-manager API")
	}
	// The bare defaults (no Secret, no cert-manager) are refused, saying what to give.
	renderFails(t, agent, nil, "TLS to Fleet is on by default (fleet.tls.enabled) and needs a client certificate")
}

// With cert-manager's API and no Secret: a Certificate for client auth from the Issuer the
// Fleet chart makes for its default release (the one that issues Fleet's certificate), in
// the Secret the DaemonSet mounts; the agent's arguments are those of the Secret mode.
func TestAgentCertManagerWhenPresent(t *testing.T) {
	certManager := []string{"cert-manager.io/v1"}
	out, err := renderChartWith(agent, nil, nil, nil, certManager)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out)
	ds := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent)
	pod := ds.Spec.Template.Spec
	checkOwnerOnly(t, pod)
	c := get[certificate](t, objs, "Certificate", agent+"-tls")
	if v := tlsVolume(pod, "tls"); v == nil || v.SecretName != c.Spec.SecretName {
		t.Errorf("tls volume %+v does not mount the Certificate's Secret %s", v, c.Spec.SecretName)
	}
	if !slices.Contains(c.Spec.Usages, "client auth") || slices.Contains(c.Spec.Usages, "server auth") {
		t.Errorf("usages %v: want client auth, not server auth", c.Spec.Usages)
	}
	if c.Spec.CommonName == "" || c.Spec.PrivateKey == nil || c.Spec.PrivateKey.RotationPolicy != "Always" {
		t.Errorf("certificate spec %+v", c.Spec)
	}
	// The Fleet chart with cert-manager has that Issuer (its CA issues Fleet's certificate
	// too, so the Secret's ca.crt checks Fleet and Fleet accepts the agents).
	fout, err := renderChartWith(fleet, nil, nil, nil, certManager)
	if err != nil {
		t.Fatal(err)
	}
	fobjs := decodeAll(t, fout)
	if c.Spec.IssuerRef.Kind != "Issuer" {
		t.Errorf("issuerRef %+v: want the Fleet chart's Issuer", c.Spec.IssuerRef)
	}
	iss := get[issuer](t, fobjs, "Issuer", c.Spec.IssuerRef.Name)
	if iss.Spec.CA == nil {
		t.Errorf("Issuer %s is not the Fleet chart's CA Issuer", iss.Metadata.Name)
	}
	if fc := get[certificate](t, fobjs, "Certificate", fleet+"-tls"); fc.Spec.IssuerRef != c.Spec.IssuerRef {
		t.Errorf("Fleet's certificate from %+v, the agents' from %+v", fc.Spec.IssuerRef, c.Spec.IssuerRef)
	}
	secretArgs := get[appsv1.DaemonSet](t, render(t, agent, agentDefaults, nil), "DaemonSet", agent).Spec.Template.Spec.Containers[0].Args
	if !slices.Equal(pod.Containers[0].Args, secretArgs) {
		t.Errorf("cert-manager args %q differ from the Secret mode's %q", pod.Containers[0].Args, secretArgs)
	}
	// A ClusterIssuer given for both charts (the agent in another namespace).
	out, err = renderChartWith(agent, nil, map[string]any{"fleet": map[string]any{"tls": map[string]any{"certManager": map[string]any{
		"issuerRef": map[string]any{"name": "ingero-ca", "kind": "ClusterIssuer"}}}}}, nil, certManager)
	if err != nil {
		t.Fatal(err)
	}
	if ref := get[certificate](t, decodeAll(t, out), "Certificate", agent+"-tls").Spec.IssuerRef; ref.Name != "ingero-ca" || ref.Kind != "ClusterIssuer" {
		t.Errorf("issuerRef %+v: want the ClusterIssuer given", ref)
	}
	// A Secret given wins over cert-manager; certManager.enabled=false never uses it.
	out, err = renderChartWith(agent, agentDefaults, nil, nil, certManager)
	if err != nil {
		t.Fatal(err)
	}
	if len(decodeAll(t, out)["Certificate"]) != 0 {
		t.Errorf("a Certificate although fleet.tls.existingSecret is given")
	}
	if _, err := renderChartWith(agent, nil, map[string]any{"fleet": map[string]any{"tls": map[string]any{"certManager": map[string]any{"enabled": "false"}}}},
		nil, certManager); err == nil || !strings.Contains(err.Error(), "TLS to Fleet is on by default") {
		t.Errorf("certManager.enabled=false and no Secret: %v", err)
	}
}

// Plaintext only as an explicit value: fleet.tls.enabled=false and an http:// endpoint; no
// certificate is mounted or requested then, even with cert-manager's API.
func TestAgentPlaintextOnlyAsAnExplicitValue(t *testing.T) {
	plain := map[string]any{"fleet": map[string]any{"endpoint": "http://ingero-fleet:4318", "tls": map[string]any{"enabled": false}}}
	out, err := renderChartWith(agent, nil, plain, nil, []string{"cert-manager.io/v1"})
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out)
	pod := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent).Spec.Template.Spec
	args := containerArgs(pod)
	if !strings.Contains(args, "--fleet-endpoint=http://ingero-fleet:4318") || strings.Contains(args, "--fleet-tls") {
		t.Errorf("plaintext args %q", args)
	}
	if tlsVolume(pod, "tls") != nil || len(objs["Certificate"]) != 0 {
		t.Errorf("plaintext mounts or requests a certificate")
	}
}

func TestAgentProduction(t *testing.T) {
	objs := render(t, agent, []string{"ci/production-values.yaml"}, nil)
	ds := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent)
	pod := ds.Spec.Template.Spec
	checkAgentPod(t, pod)
	args := containerArgs(pod)
	for _, want := range []string{
		"--fleet-tls-ca=/etc/ingero/tls/ca.crt", "--fleet-tls-key=/etc/ingero/tls/tls.key",
		"--fleet-token-file=/etc/ingero/token/token", "--fleet-threshold-url=https://ingero-fleet.ingero.svc:8080",
		"--fleet-world-size=64", "--cgroup=kubepods.slice", "--remediate-socket=/run/ingero-agent/remediate.sock", "--log-json",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	checkOwnerOnly(t, pod)
	// Pushes (4318) and the threshold URL (8080) to Fleet's pods only, DNS, the node-local
	// DNS cache the values add; no metadata rule (provider aws is given).
	checkAgentNetworkPolicy(t, objs, pod, []string{
		"TCP/4318,TCP/8080 to selector", "UDP/53,TCP/53 to kube-dns", "UDP/53 to cidr:169.254.20.10/32",
	})
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", agent)
	if from := np.Spec.Ingress[0].From; len(from) != 1 || from[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("metrics ingress from %v, want the monitoring namespace", from)
	}
}

// The ports of Fleet's URLs as the agent uses them (explicit, else by scheme), and the
// explicit override.
func TestAgentNetworkPolicyPorts(t *testing.T) {
	plainTLS := map[string]any{"enabled": false, "existingSecret": ""}
	for _, c := range []struct {
		set  map[string]any
		want string
	}{
		{map[string]any{"endpoint": "https://fleet.example.com"}, "TCP/443 to any"},
		{map[string]any{"endpoint": "fleet.example.com"}, "TCP/443 to any"},
		{map[string]any{"endpoint": "http://fleet.example.com/", "tls": plainTLS}, "TCP/80 to any"},
		{map[string]any{"endpoint": "fleet:9000", "insecure": true, "tls": plainTLS}, "TCP/9000 to any"},
		{map[string]any{"endpoint": "https://[fd00::1]:4318", "thresholdUrl": "https://[fd00::1]:8080"}, "TCP/4318,TCP/8080 to any"},
		{map[string]any{"endpoint": "http://f:4318", "thresholdUrl": "http://f:4318", "tls": plainTLS}, "TCP/4318 to any"},
	} {
		objs := render(t, agent, agentDefaults, map[string]any{"fleet": c.set})
		np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", agent)
		if got := egressRules(np)[0]; got != c.want {
			t.Errorf("fleet %v: Fleet egress %q, want %q", c.set, got, c.want)
		}
	}
	objs := render(t, agent, agentDefaults, map[string]any{
		"networkPolicy": map[string]any{"fleetPorts": []any{4318, 8443}},
		"fleet":         map[string]any{"provider": "none"},
	})
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", agent)
	if got := egressRules(np); !slices.Equal(got, []string{"TCP/4318,TCP/8443 to any", "UDP/53,TCP/53 to kube-dns"}) {
		t.Errorf("fleetPorts override, provider none: egress %q", got)
	}
	objs = render(t, agent, agentDefaults, map[string]any{"networkPolicy": map[string]any{"enabled": false}})
	if len(objs["NetworkPolicy"]) != 0 {
		t.Errorf("networkPolicy.enabled=false still renders one")
	}
}

func TestAgentRefusals(t *testing.T) {
	tls := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	secret := tls("existingSecret", "agent-tls")
	for _, c := range []struct {
		fleet map[string]any
		want  string
	}{
		{map[string]any{"clusterId": "", "tls": secret}, "fleet.clusterId is required"},
		{map[string]any{"endpoint": "", "tls": secret}, "fleet.endpoint is required"},
		// TLS on (the default) with a plaintext endpoint or threshold URL: half a TLS config.
		{map[string]any{"endpoint": "http://ingero-fleet:4318", "tls": secret}, `fleet.endpoint "http://ingero-fleet:4318" is plaintext`},
		{map[string]any{"endpoint": "ingero-fleet:4318", "insecure": true, "tls": secret}, `fleet.endpoint "ingero-fleet:4318" is plaintext`},
		{map[string]any{"thresholdUrl": "http://ingero-fleet:8080", "tls": secret}, `fleet.thresholdUrl "http://ingero-fleet:8080" is plaintext`},
		// A certificate or CA given while TLS is off would be ignored.
		{map[string]any{"endpoint": "http://f:4318", "tls": tls("enabled", false, "existingSecret", "agent-tls")}, "fleet.tls.existingSecret is given but fleet.tls.enabled is false"},
		{map[string]any{"endpoint": "http://f:4318", "tls": tls("enabled", false, "caSecret", "fleet-ca")}, "fleet.tls.caSecret is given but fleet.tls.enabled is false"},
		// cert-manager asked for but not installed, or a value it does not know.
		{map[string]any{"tls": tls("certManager", map[string]any{"enabled": true})}, "the cert-manager API (cert-manager.io/v1) is not installed"},
		{map[string]any{"tls": tls("certManager", map[string]any{"enabled": "yes"})}, "fleet.tls.certManager.enabled must be auto, true or false"},
		{map[string]any{"tls": secret, "token": map[string]any{"enabled": true}}, "fleet.token.enabled needs fleet.token.existingSecret"},
	} {
		renderFails(t, agent, map[string]any{"fleet": c.fleet}, c.want)
	}
	// cert-manager without an issuer to ask.
	_, err := renderChartWith(agent, nil, map[string]any{"fleet": map[string]any{"tls": map[string]any{"certManager": map[string]any{
		"issuerRef": map[string]any{"name": ""}}}}}, nil, []string{"cert-manager.io/v1"})
	if err == nil || !strings.Contains(err.Error(), "fleet.tls.certManager.issuerRef.name is needed") {
		t.Errorf("cert-manager without an issuer: %v", err)
	}
}

// apiOn turns the query API on with the given api values merged in.
func apiOn(kv map[string]any) map[string]any {
	a := map[string]any{"enabled": true}
	for k, v := range kv {
		a[k] = v
	}
	return map[string]any{"api": a}
}

// secretItems lists a Secret volume's items as key->path.
func secretItems(v *corev1.SecretVolumeSource) []string {
	var items []string
	for _, it := range v.Items {
		items = append(items, it.Key+"->"+it.Path)
	}
	return items
}

// The query API is off by default; turned on, it serves TLS by default: the certificate,
// key and client CA from the Secret given, mounted owner-only, wired to --api-tls-*, behind
// a headless Service and an ingress rule of its own. Without a certificate source the
// install fails, naming the values.
func TestAgentAPIServesTLSByDefault(t *testing.T) {
	pod := get[appsv1.DaemonSet](t, render(t, agent, agentDefaults, nil), "DaemonSet", agent).Spec.Template.Spec
	if args := containerArgs(pod); strings.Contains(args, "--api") {
		t.Errorf("the API is on by default: %q", args)
	}
	renderFails(t, agent, merge(apiOn(nil), map[string]any{"fleet": map[string]any{"tls": map[string]any{"existingSecret": "agent-tls"}}}),
		"The query API serves TLS by default (api.tls.enabled) and needs a certificate")

	objs := render(t, agent, agentDefaults, apiOn(map[string]any{"tls": map[string]any{"existingSecret": "agent-api-tls"}}))
	pod = get[appsv1.DaemonSet](t, objs, "DaemonSet", agent).Spec.Template.Spec
	checkAgentPod(t, pod)
	checkOwnerOnly(t, pod)
	args := containerArgs(pod)
	for _, want := range []string{"--api-listen=0.0.0.0:8080", "--api-tls-cert=/etc/ingero/api-tls/tls.crt",
		"--api-tls-key=/etc/ingero/api-tls/tls.key", "--api-client-ca=/etc/ingero/api-tls/ca.crt"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--api-no-tls") || strings.Contains(args, "--api-allow-plaintext") || strings.Contains(args, "--api-token-file") {
		t.Errorf("TLS defaults with plaintext or a token: %q", args)
	}
	v := tlsVolume(pod, "api-tls")
	if v == nil || v.SecretName != "agent-api-tls" {
		t.Fatalf("api-tls volume %+v: want the Secret agent-api-tls", v)
	}
	if items := secretItems(v); !slices.Equal(items, []string{"tls.crt->tls.crt", "tls.key->tls.key", "ca.crt->ca.crt"}) {
		t.Errorf("api-tls volume items %v", items)
	}
	if len(objs["Certificate"]) != 0 {
		t.Errorf("a Certificate with a Secret given and no cert-manager API")
	}
	svc := get[corev1.Service](t, objs, "Service", agent)
	if svc.Spec.ClusterIP != "None" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("Service %+v: want headless on 8080", svc.Spec)
	}
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", agent)
	var ports []int
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			ports = append(ports, p.Port.IntValue())
		}
	}
	if !slices.Equal(ports, []int{9465, 8080}) {
		t.Errorf("ingress ports %v: want the metrics port and the API's", ports)
	}
	// Without mTLS: no client CA mounted or passed.
	objs = render(t, agent, agentDefaults, apiOn(map[string]any{"tls": map[string]any{"existingSecret": "agent-api-tls", "requireClientCert": false}}))
	pod = get[appsv1.DaemonSet](t, objs, "DaemonSet", agent).Spec.Template.Spec
	if args := containerArgs(pod); strings.Contains(args, "--api-client-ca") || !strings.Contains(args, "--api-tls-cert=") {
		t.Errorf("requireClientCert=false args %q", args)
	}
	if items := secretItems(tlsVolume(pod, "api-tls")); slices.Contains(items, "ca.crt->ca.crt") {
		t.Errorf("requireClientCert=false mounts the CA: %v", items)
	}
}

// Plaintext on the API only as the explicit value api.tls.enabled=false: --api-no-tls with
// the non-loopback override (the pod's address), no certificate mounted or requested, even
// with cert-manager's API.
func TestAgentAPIPlaintextOnlyAsAnExplicitValue(t *testing.T) {
	out, err := renderChartWith(agent, agentDefaults, apiOn(map[string]any{"tls": map[string]any{"enabled": false}}), nil, []string{"cert-manager.io/v1"})
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out)
	pod := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent).Spec.Template.Spec
	args := containerArgs(pod)
	if !strings.Contains(args, "--api-no-tls") || !strings.Contains(args, "--api-allow-plaintext-non-loopback") || strings.Contains(args, "--api-tls") || strings.Contains(args, "--api-client-ca") {
		t.Errorf("plaintext API args %q", args)
	}
	if tlsVolume(pod, "api-tls") != nil {
		t.Errorf("plaintext API mounts a certificate")
	}
	for name := range objs["Certificate"] {
		if strings.Contains(name, "api") {
			t.Errorf("plaintext API requests a Certificate %s", name)
		}
	}
}

// With cert-manager's API and no Secret: a server-auth Certificate valid for the headless
// Service's per-pod names, from the Fleet chart's CA Issuer by default, in the Secret the
// DaemonSet mounts; the arguments are those of the Secret mode.
func TestAgentAPICertManagerWhenPresent(t *testing.T) {
	certManager := []string{"cert-manager.io/v1"}
	out, err := renderChartWith(agent, nil, apiOn(nil), nil, certManager)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out)
	pod := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent).Spec.Template.Spec
	checkOwnerOnly(t, pod)
	c := get[certificate](t, objs, "Certificate", agent+"-api-tls")
	if v := tlsVolume(pod, "api-tls"); v == nil || v.SecretName != c.Spec.SecretName || c.Spec.SecretName == get[certificate](t, objs, "Certificate", agent+"-tls").Spec.SecretName {
		t.Errorf("api-tls volume %+v: want the API Certificate's own Secret %s", v, c.Spec.SecretName)
	}
	if !slices.Contains(c.Spec.Usages, "server auth") || slices.Contains(c.Spec.Usages, "client auth") {
		t.Errorf("usages %v: want server auth only", c.Spec.Usages)
	}
	if !slices.Contains(c.Spec.DNSNames, "*."+agent+".ingero.svc") || !slices.Contains(c.Spec.DNSNames, agent+".ingero.svc") {
		t.Errorf("dnsNames %v lack the headless Service's names", c.Spec.DNSNames)
	}
	if c.Spec.IssuerRef.Name != "ingero-fleet-ca" || c.Spec.PrivateKey == nil || c.Spec.PrivateKey.RotationPolicy != "Always" {
		t.Errorf("certificate spec %+v", c.Spec)
	}
	secretArgs := get[appsv1.DaemonSet](t, render(t, agent, agentDefaults, apiOn(map[string]any{"tls": map[string]any{"existingSecret": "agent-api-tls"}})),
		"DaemonSet", agent).Spec.Template.Spec.Containers[0].Args
	if !slices.Equal(pod.Containers[0].Args, secretArgs) {
		t.Errorf("cert-manager args %q differ from the Secret mode's %q", pod.Containers[0].Args, secretArgs)
	}
	// A Secret given wins; certManager.enabled=false without a Secret is refused.
	out, err = renderChartWith(agent, agentDefaults, apiOn(map[string]any{"tls": map[string]any{"existingSecret": "agent-api-tls"}}), nil, certManager)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeAll(t, out)["Certificate"][agent+"-api-tls"]; ok {
		t.Errorf("an API Certificate although api.tls.existingSecret is given")
	}
	if _, err := renderChartWith(agent, agentDefaults, apiOn(map[string]any{"tls": map[string]any{"certManager": map[string]any{"enabled": "false"}}}),
		nil, certManager); err == nil || !strings.Contains(err.Error(), "The query API serves TLS by default") {
		t.Errorf("api certManager.enabled=false and no Secret: %v", err)
	}
}

// The API's token: a Secret key mounted as a directory (no subPath, so the kubelet's
// updates reach the file the agent re-reads), owner-only, wired to --api-token-file.
func TestAgentAPIToken(t *testing.T) {
	objs := render(t, agent, []string{"ci/production-values.yaml"}, nil)
	pod := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent).Spec.Template.Spec
	checkOwnerOnly(t, pod)
	if args := containerArgs(pod); !strings.Contains(args, "--api-token-file=/etc/ingero/api-token/token") || !strings.Contains(args, "--api-tls-cert=") {
		t.Errorf("args %q lack the API's token or certificate", args)
	}
	v := tlsVolume(pod, "api-token")
	if v == nil || v.SecretName != "agent-api-token" || !slices.Equal(secretItems(v), []string{"token->token"}) {
		t.Fatalf("api-token volume %+v", v)
	}
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.Name == "api-token" && (m.SubPath != "" || m.MountPath != "/etc/ingero/api-token" || !m.ReadOnly) {
			t.Errorf("api-token mount %+v: want a read-only directory without subPath", m)
		}
	}
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", agent)
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[1].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ml-platform" {
		t.Errorf("API ingress %+v: want from the ml-platform namespace", np.Spec.Ingress)
	}
	for _, c := range []struct {
		api  map[string]any
		want string
	}{
		{map[string]any{"tls": map[string]any{"existingSecret": "s"}, "token": map[string]any{"enabled": true}}, "api.token.enabled needs api.token.existingSecret"},
		{map[string]any{"tls": map[string]any{"enabled": false, "existingSecret": "s"}}, "api.tls.existingSecret is given but api.tls.enabled is false"},
		{map[string]any{"tls": map[string]any{"certManager": map[string]any{"enabled": true}}}, "api.tls.certManager.enabled=true, but the cert-manager API"},
		{map[string]any{"tls": map[string]any{"existingSecret": "s"}, "port": 9465}, "api.port and metrics.port must differ"},
	} {
		renderFails(t, agent, map[string]any{"fleet": map[string]any{"tls": map[string]any{"existingSecret": "agent-tls"}}, "api": merge(map[string]any{"enabled": true}, c.api)}, c.want)
	}
}

func merge(a, b map[string]any) map[string]any {
	for k, v := range b {
		a[k] = v
	}
	return a
}
