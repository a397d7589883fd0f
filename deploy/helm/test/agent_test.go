package helmtest

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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

func TestAgentDefaults(t *testing.T) {
	objs := render(t, agent, nil, nil)
	ds := get[appsv1.DaemonSet](t, objs, "DaemonSet", agent)
	checkAgentPod(t, ds.Spec.Template.Spec)
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
}

func TestAgentRefusals(t *testing.T) {
	renderFails(t, agent, map[string]any{"fleet": map[string]any{"clusterId": ""}}, "fleet.clusterId is required")
	renderFails(t, agent, map[string]any{"fleet": map[string]any{"tls": map[string]any{"enabled": true}}}, "fleet.tls.enabled needs")
}
