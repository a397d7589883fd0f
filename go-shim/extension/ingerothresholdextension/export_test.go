package ingerothresholdextension

import (
	"context"
	"net/http"

	"go.opentelemetry.io/collector/extension"
	"google.golang.org/grpc"
)

// Test hooks (compiled into this package's tests only).

func UnaryInterceptorForTest(e extension.Extension) func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
	return e.(*thresholdExtension).unaryInterceptor
}

func AddrForTest(e extension.Extension, name string) string {
	te := e.(*thresholdExtension)
	te.mu.Lock()
	defer te.mu.Unlock()
	return te.addrs[name]
}

func AgentHandlerForTest(e extension.Extension) http.Handler {
	te := e.(*thresholdExtension)
	return routeHandler(te.h.RouteAgent, te.set.Logger)
}
