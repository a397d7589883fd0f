// Package ingerothresholdextension is the `ingero_threshold` extension of Ingero Fleet for
// Go OpenTelemetry Collectors. It owns the Rust threshold store the `ingero` processor
// publishes into, serves the agents' threshold GET (`agent_endpoint`) and the diagnostics
// (`admin_endpoint`) from Go net/http with answers from the Rust router, and is an HTTP and
// gRPC server middleware: a stock `otlp` receiver with
// `middlewares: [{id: ingero_threshold}]` returns X-Ingero-Threshold / X-Ingero-Quorum-Met
// (gRPC: ingero-threshold / ingero-quorum-met metadata) on metrics pushes.
package ingerothresholdextension

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.uber.org/zap"

	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/ffi"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/rawconfig"
	"github.com/ingero-io/ingero-fleet-rs/go-shim/internal/selftelemetry"
)

// Listener limits (the Rust host's: header timeout, idle timeout, header size).
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	drainTimeout      = 10 * time.Second
)

// NewFactory returns the `ingero_threshold` extension factory.
func NewFactory() extension.Factory {
	return extension.NewFactory(
		component.MustNewType(Type),
		func() component.Config { return rawconfig.New(Type) },
		create,
		Stability,
	)
}

func create(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	rc, ok := cfg.(*rawconfig.Config)
	if !ok {
		return nil, fmt.Errorf("unexpected config type %T", cfg)
	}
	b, err := rc.JSON()
	if err != nil {
		return nil, err
	}
	h, err := ffi.NewExtension(set.ID.String(), b)
	if err != nil {
		return nil, err
	}
	var eff struct {
		AgentEndpoint string `json:"agent_endpoint"`
		AdminEndpoint string `json:"admin_endpoint"`
	}
	cj, err := h.ConfigJSON()
	if err == nil {
		err = json.Unmarshal(cj, &eff)
	}
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("reading the effective config: %w", err)
	}
	return &thresholdExtension{
		set:           set,
		h:             h,
		agentEndpoint: eff.AgentEndpoint,
		adminEndpoint: eff.AdminEndpoint,
	}, nil
}

type thresholdExtension struct {
	set           extension.Settings
	h             *ffi.Extension
	agentEndpoint string
	adminEndpoint string

	mu      sync.Mutex
	servers []*http.Server
	addrs   map[string]string // listener name -> bound address
	wg      sync.WaitGroup
	unreg   func() error
}

var (
	_ extension.Extension            = (*thresholdExtension)(nil)
	_ extensionmiddleware.HTTPServer = (*thresholdExtension)(nil)
	_ extensionmiddleware.GRPCServer = (*thresholdExtension)(nil)
)

// IngeroExtension is the Rust handle the Ingero processors start with.
func (e *thresholdExtension) IngeroExtension() *ffi.Extension { return e.h }

func (e *thresholdExtension) Start(_ context.Context, _ component.Host) error {
	if err := e.h.Start(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.listen("agent", e.agentEndpoint, e.h.RouteAgent); err != nil {
		e.closeServers(context.Background())
		return err
	}
	if e.adminEndpoint != "" {
		if err := e.listen("admin", e.adminEndpoint, e.h.RouteAdmin); err != nil {
			e.closeServers(context.Background())
			return err
		}
	}
	unreg, err := selftelemetry.Register(e.set.MeterProvider, "github.com/ingero-io/ingero-fleet-rs/go-shim/"+Type, e.h.TelemetryJSON)
	if err != nil {
		e.set.Logger.Warn("component self-metrics unavailable", zap.Error(err))
	} else {
		e.unreg = unreg
	}
	return nil
}

func (e *thresholdExtension) listen(name, endpoint string, route func(method, path, query string) (ffi.Response, error)) error {
	ln, err := net.Listen("tcp", endpoint)
	if err != nil {
		return fmt.Errorf("%s listener on %s: %w", name, endpoint, err)
	}
	srv := &http.Server{
		Handler:           routeHandler(route, e.set.Logger),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          zap.NewStdLog(e.set.Logger),
	}
	e.servers = append(e.servers, srv)
	if e.addrs == nil {
		e.addrs = map[string]string{}
	}
	e.addrs[name] = ln.Addr().String()
	// The same line ingero-fleet logs, so tools find the bound port (endpoint port 0).
	e.set.Logger.Info("listening", zap.String("listener", e.set.ID.String()+"/"+name), zap.String("addr", ln.Addr().String()))
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.set.Logger.Error("threshold listener stopped", zap.String("listener", name), zap.Error(err))
		}
	}()
	return nil
}

// routeHandler answers every request through the Rust router: same status, content type,
// headers and body as ingero-fleet. No redirects, no body read (GET only).
func routeHandler(route func(method, path, query string) (ffi.Response, error), log *zap.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := route(r.Method, r.URL.Path, r.URL.RawQuery)
		if err != nil {
			log.Warn("threshold route failed", zap.Error(err))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":"internal error"}`))
			return
		}
		h := w.Header()
		for _, kv := range resp.Headers {
			h.Add(kv[0], kv[1])
		}
		h.Set("Content-Type", resp.ContentType)
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
	})
}

func (e *thresholdExtension) closeServers(ctx context.Context) {
	for _, s := range e.servers {
		if err := s.Shutdown(ctx); err != nil {
			_ = s.Close()
		}
	}
	e.servers = nil
	e.wg.Wait()
}

func (e *thresholdExtension) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	e.closeServers(dctx)
	if e.unreg != nil {
		_ = e.unreg()
		e.unreg = nil
	}
	// The handle stays open: processors and receivers still draining may ask for headers,
	// and Start may follow again. It lives as long as the process (one per extension id).
	return e.h.Shutdown()
}
