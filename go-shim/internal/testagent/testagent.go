// Package testagent builds, as pmetric, the health push the Ingero agent sends (the same
// content as the Rust testkit's AgentPush): tests and benchmarks of the shim's data path.
package testagent

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// T0 is the fixed push time the fixtures use (2025-11-22T00:00:00Z).
const T0 = uint64(1_763_769_600_000_000_000)

// Scores of one cluster's 8 nodes: 7 peers and one straggler (node 07).
var Scores = []float64{0.95, 0.96, 0.94, 0.95, 0.97, 0.955, 0.945, 0.60}

// AppendPush appends one agent health push (one resource) to md.
func AppendPush(md pmetric.Metrics, cluster, node string, score float64) {
	rm := md.ResourceMetrics().AppendEmpty()
	ra := rm.Resource().Attributes()
	ra.PutStr("ingero.node.id", node)
	ra.PutStr("ingero.cluster.id", cluster)
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("ingero.health")
	sm.Scope().SetVersion("0.10.0")
	ts := pcommon.Timestamp(T0)
	gauge := func(name string, attrs [][2]string, f func(pmetric.NumberDataPoint)) {
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		m.SetUnit("1")
		p := m.SetEmptyGauge().DataPoints().AppendEmpty()
		for _, a := range attrs {
			p.Attributes().PutStr(a[0], a[1])
		}
		p.SetTimestamp(ts)
		f(p)
	}
	common := [][2]string{{"ingero.node.state", "active"}, {"ingero.workload_type", "training"}}
	withHash := append(append([][2]string{}, common...), [2]string{"ingero.cgroup_path_hash", "8a5edab282632443"})
	sub := min(max(score, 0), 1)
	gauge("ingero.node.health_score", withHash, func(p pmetric.NumberDataPoint) { p.SetDoubleValue(score) })
	gauge("ingero.node.throughput_ratio", common, func(p pmetric.NumberDataPoint) { p.SetDoubleValue(sub) })
	gauge("ingero.node.compute_efficiency", common, func(p pmetric.NumberDataPoint) { p.SetDoubleValue(0.9) })
	gauge("ingero.node.memory_headroom", common, func(p pmetric.NumberDataPoint) { p.SetDoubleValue(0.85) })
	gauge("ingero.node.cpu_availability", common, func(p pmetric.NumberDataPoint) { p.SetDoubleValue(0.9) })
	gauge("ingero.node.degradation_warning", common, func(p pmetric.NumberDataPoint) { p.SetIntValue(0) })
	gauge("ingero.agent.detection_mode", [][2]string{{"ingero.detection_mode", "none"}}, func(p pmetric.NumberDataPoint) { p.SetIntValue(1) })
	gauge("ingero.agent.fleet_reachable", nil, func(p pmetric.NumberDataPoint) { p.SetIntValue(1) })
	gauge("ingero.node.world_size", nil, func(p pmetric.NumberDataPoint) { p.SetIntValue(0) })
}

// Cluster is one batch with every node of a cluster (Scores), so a tick never sees half.
func Cluster(cluster string) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for i, s := range Scores {
		AppendPush(md, cluster, fmt.Sprintf("%s-node-%02d", cluster, i), s)
	}
	return md
}

// Push is one node's push as its own batch.
func Push(cluster, node string, score float64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	AppendPush(md, cluster, node, score)
	return md
}
