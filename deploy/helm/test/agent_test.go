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
	metricsPort := pod.Containers[0].Ports[0].ContainerPort
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != int(metricsPort) {
		t.Errorf("ingress %v: want exactly the metrics port %d", np.Spec.Ingress, metricsPort)
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

func TestAgentDefaults(t *testing.T) {
	objs := render(t, agent, nil, nil)
	ds := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent)
	checkAgentPod(t, ds.Spec.Template.Spec)
	// Fleet's OTLP/HTTP port from fleet.endpoint, DNS, and the metadata service that
	// --fleet-provider=auto (the default) asks.
	checkAgentNetworkPolicy(t, objs, ds.Spec.Template.Spec, []string{
		"TCP/4318 to any", "UDP/53,TCP/53 to kube-dns", "TCP/80 to cidr:169.254.169.254/32",
	})
	args := containerArgs(ds.Spec.Template.Spec)
	for _, want := range []string{"--fleet-endpoint=http://ingero-fleet:4318", "--fleet-cluster-id=default", "--fleet-node-id=$(NODE_NAME)", "--metrics-listen=0.0.0.0:9465"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--fleet-tls") || strings.Contains(args, "--remediate") {
		t.Errorf("defaults turn on TLS or remediation: %q", args)
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
	for _, v := range pod.Volumes {
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400) {
			t.Errorf("secret %s mode %v: the agent refuses a key readable by others", v.Name, v.Secret.DefaultMode)
		}
	}
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
	for _, c := range []struct {
		set  map[string]any
		want string
	}{
		{map[string]any{"endpoint": "https://fleet.example.com"}, "TCP/443 to any"},
		{map[string]any{"endpoint": "http://fleet.example.com/"}, "TCP/80 to any"},
		{map[string]any{"endpoint": "fleet:9000", "insecure": true}, "TCP/9000 to any"},
		{map[string]any{"endpoint": "http://[fd00::1]:4318", "thresholdUrl": "http://[fd00::1]:8080"}, "TCP/4318,TCP/8080 to any"},
		{map[string]any{"endpoint": "http://f:4318", "thresholdUrl": "http://f:4318"}, "TCP/4318 to any"},
	} {
		objs := render(t, agent, nil, map[string]any{"fleet": c.set})
		np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", agent)
		if got := egressRules(np)[0]; got != c.want {
			t.Errorf("fleet %v: Fleet egress %q, want %q", c.set, got, c.want)
		}
	}
	objs := render(t, agent, nil, map[string]any{
		"networkPolicy": map[string]any{"fleetPorts": []any{4318, 8443}},
		"fleet":         map[string]any{"provider": "none"},
	})
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", agent)
	if got := egressRules(np); !slices.Equal(got, []string{"TCP/4318,TCP/8443 to any", "UDP/53,TCP/53 to kube-dns"}) {
		t.Errorf("fleetPorts override, provider none: egress %q", got)
	}
	objs = render(t, agent, nil, map[string]any{"networkPolicy": map[string]any{"enabled": false}})
	if len(objs["NetworkPolicy"]) != 0 {
		t.Errorf("networkPolicy.enabled=false still renders one")
	}
}

func TestAgentRefusals(t *testing.T) {
	renderFails(t, agent, map[string]any{"fleet": map[string]any{"clusterId": ""}}, "fleet.clusterId is required")
	renderFails(t, agent, map[string]any{"fleet": map[string]any{"tls": map[string]any{"enabled": true}}}, "fleet.tls.enabled needs")
}
