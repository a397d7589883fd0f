// Package shimprocessor is the one Go implementation behind the three processor factories
// (`ingero`, `provider_lookup`, `nccl_peer_lag`): config validated by Rust, one Rust
// processor per component id, one cgo call per batch, a Go ticker calling the Rust tick, and
// what the tick emits sent to the next consumer.
package shimprocessor

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.uber.org/zap"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/ffi"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/rawconfig"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/requestctx"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/selftelemetry"
)

// ClusterAttribute is the resource attribute naming a push's cluster.
const ClusterAttribute = "ingero.cluster.id"

// FFIExtension is implemented by the ingero_threshold extension: its Rust handle.
type FFIExtension interface {
	IngeroExtension() *ffi.Extension
}

// NewFactory is the processor factory of one Rust processor type.
func NewFactory(componentType string, stability component.StabilityLevel) processor.Factory {
	return processor.NewFactory(
		component.MustNewType(componentType),
		func() component.Config { return rawconfig.New(componentType) },
		processor.WithMetrics(func(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
			return createMetrics(ctx, set, cfg, next)
		}, stability),
	)
}

// instances shares one Rust processor per component id across the pipelines that list it,
// as ingero-fleet does: a cluster's statistic must not be split between pipelines.
var instances = struct {
	sync.Mutex
	byID map[component.ID]*core
}{byID: map[component.ID]*core{}}

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	rc, ok := cfg.(*rawconfig.Config)
	if !ok {
		return nil, fmt.Errorf("unexpected config type %T", cfg)
	}
	c, err := acquire(set, rc, next)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, c.processMetrics,
		processorhelper.WithStart(c.start),
		processorhelper.WithShutdown(c.shutdown),
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
	)
}

func acquire(set processor.Settings, cfg *rawconfig.Config, next consumer.Metrics) (*core, error) {
	instances.Lock()
	defer instances.Unlock()
	if c, ok := instances.byID[set.ID]; ok {
		c.refs++
		return c, nil
	}
	b, err := cfg.JSON()
	if err != nil {
		return nil, err
	}
	p, err := ffi.NewProcessor(set.ID.String(), b)
	if err != nil {
		return nil, err
	}
	interval, err := p.TickInterval()
	if err != nil {
		p.Close()
		return nil, err
	}
	c := &core{
		id:       set.ID,
		set:      set,
		p:        p,
		next:     next,
		interval: interval,
		refs:     1,
	}
	instances.byID[set.ID] = c
	return c, nil
}

// core is one Rust processor and its ticker, shared by the pipelines listing its id.
type core struct {
	id       component.ID
	set      processor.Settings
	p        *ffi.Processor
	next     consumer.Metrics
	interval time.Duration

	// guarded by instances' lock
	refs    int
	started int
	stop    chan struct{}
	done    chan struct{}
	unreg   []func() error

	lastErrLog atomic.Int64
	errors     atomic.Uint64
}

var (
	marshaler   pmetric.ProtoMarshaler
	unmarshaler pmetric.ProtoUnmarshaler
)

func (c *core) start(_ context.Context, host component.Host) error {
	instances.Lock()
	defer instances.Unlock()
	c.started++
	if c.started > 1 {
		return nil
	}
	if err := c.p.Start(findExtensions(host)); err != nil {
		c.started--
		return err
	}
	if unreg, err := selftelemetry.Register(c.set.MeterProvider, "github.com/ingero-io/ingero-fleet-rs/go-shim/"+c.id.Type().String(), c.p.TelemetryJSON); err != nil {
		c.set.Logger.Warn("component self-metrics unavailable", zap.Error(err))
	} else {
		c.unreg = append(c.unreg, unreg)
	}
	c.stop = make(chan struct{})
	c.done = make(chan struct{})
	go c.tickLoop(c.stop, c.done)
	return nil
}

// findExtensions lists the host's Ingero extensions in id order (the Rust processor
// publishes into the first ingero_threshold one).
func findExtensions(host component.Host) []*ffi.Extension {
	if host == nil {
		return nil
	}
	type found struct {
		id  string
		ext *ffi.Extension
	}
	var list []found
	for id, ext := range host.GetExtensions() {
		if fe, ok := ext.(FFIExtension); ok && fe.IngeroExtension() != nil {
			list = append(list, found{id.String(), fe.IngeroExtension()})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
	out := make([]*ffi.Extension, 0, len(list))
	for _, f := range list {
		out = append(out, f.ext)
	}
	return out
}

func (c *core) shutdown(_ context.Context) error {
	instances.Lock()
	defer instances.Unlock()
	if c.started > 0 {
		c.started--
		if c.started == 0 {
			close(c.stop)
			<-c.done
			for _, u := range c.unreg {
				_ = u()
			}
			c.unreg = nil
			_ = c.p.Shutdown()
		}
	}
	c.refs--
	if c.refs <= 0 && c.started == 0 {
		delete(instances.byID, c.id)
		c.p.Close()
	}
	return nil
}

func (c *core) tickLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			c.tick(now)
		}
	}
}

// tick runs the Rust tick and sends what it emitted to the next consumer.
func (c *core) tick(now time.Time) {
	data, err := c.p.Tick(now)
	if err != nil {
		c.logDataPathError("tick failed", err)
		return
	}
	if len(data) == 0 {
		return
	}
	md, err := unmarshaler.UnmarshalMetrics(data)
	if err != nil {
		c.logDataPathError("tick output did not decode", err)
		return
	}
	if err := c.next.ConsumeMetrics(context.Background(), md); err != nil {
		c.logDataPathError("next consumer refused tick output", err)
	}
}

// processMetrics: marshal, one cgo call, unmarshal only when Rust changed the batch. A
// failure is counted and logged at a bounded rate; the batch then passes unchanged.
func (c *core) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	st := requestctx.From(ctx)
	var cluster string
	if st != nil {
		cluster = st.Cluster
		if st.NeedsPayloadCluster() {
			st.SetPayloadCluster(PayloadCluster(md))
		}
	}
	b, err := marshaler.MarshalMetrics(md)
	if err != nil {
		c.logDataPathError("marshal failed; batch passed through", err)
		return md, nil
	}
	res, err := c.p.Process(b, cluster, time.Now())
	if err != nil {
		c.logDataPathError("process failed; batch passed through", err)
		return md, nil
	}
	if !res.Modified {
		return md, nil
	}
	out, err := unmarshaler.UnmarshalMetrics(res.Data)
	if err != nil {
		c.logDataPathError("processed batch did not decode; original passed through", err)
		return md, nil
	}
	return out, nil
}

// PayloadCluster is the first resource's valid `ingero.cluster.id`, or "".
func PayloadCluster(md pmetric.Metrics) string {
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		v, ok := rms.At(i).Resource().Attributes().Get(ClusterAttribute)
		if !ok {
			continue
		}
		if s := v.Str(); s != "" && ffi.ValidateClusterID(s) {
			return s
		}
	}
	return ""
}

// Errors is how many data-path failures this processor counted.
func (c *core) Errors() uint64 { return c.errors.Load() }

func (c *core) logDataPathError(msg string, err error) {
	c.errors.Add(1)
	now := time.Now().UnixNano()
	last := c.lastErrLog.Load()
	if now-last < int64(10*time.Second) || !c.lastErrLog.CompareAndSwap(last, now) {
		return
	}
	c.set.Logger.Warn(msg, zap.Error(err), zap.Uint64("errors_total", c.errors.Load()))
}

// TickNow runs one tick of the processor with this id at `now`, as its ticker would, and
// reports whether such a processor exists. Tests use it instead of waiting for the ticker.
func TickNow(id component.ID, now time.Time) bool {
	instances.Lock()
	c, ok := instances.byID[id]
	instances.Unlock()
	if ok {
		c.tick(now)
	}
	return ok
}
