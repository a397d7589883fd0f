//go:build cgo

// Package ffi is the Go side of the C ABI of libingero_fleet (the Rust components). Every
// exported function here is one cgo call; errors carry the library's result code and, where
// the library has one, its detailed message.
package ffi

/*
#cgo CFLAGS: -I${SRCDIR}/../../lib -I${SRCDIR}/../../../ffi/include
#cgo LDFLAGS: -L${SRCDIR}/../../lib -lingero_fleet -lm -ldl -lpthread
// The data-path calls: Rust keeps no pointer past the call and never calls into Go, so the
// result struct on the Go stack need not escape to the heap (one allocation less per batch).
#cgo noescape ingero_processor_process
#cgo nocallback ingero_processor_process
#cgo noescape ingero_buf_free
#cgo nocallback ingero_buf_free
#include <stdlib.h>
#include "ingero_fleet.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Result codes of the C ABI (ingero_result).
const (
	CodeOK              = uint32(C.INGERO_OK)
	CodeNoThreshold     = uint32(C.INGERO_NO_THRESHOLD)
	CodeNullArgument    = uint32(C.INGERO_ERR_NULL_ARGUMENT)
	CodeInvalidLength   = uint32(C.INGERO_ERR_INVALID_LENGTH)
	CodeInvalidUTF8     = uint32(C.INGERO_ERR_INVALID_UTF8)
	CodeUnknownType     = uint32(C.INGERO_ERR_UNKNOWN_TYPE)
	CodeInvalidConfig   = uint32(C.INGERO_ERR_INVALID_CONFIG)
	CodeDecode          = uint32(C.INGERO_ERR_DECODE)
	CodeStart           = uint32(C.INGERO_ERR_START)
	CodeInvalidArgument = uint32(C.INGERO_ERR_INVALID_ARGUMENT)
	CodePanic           = uint32(C.INGERO_ERR_PANIC)
	CodeInternal        = uint32(C.INGERO_ERR_INTERNAL)
	CodeWrongKind       = uint32(C.INGERO_ERR_WRONG_KIND)
)

// LinkedLibSHA256 is the sha256 of the libingero_fleet.a this binary was linked against,
// stamped at link time by `-ldflags "$(go-shim/scripts/lib-ldflags.sh)"`; empty when the
// build did not pass it. The stamp also makes a rebuilt archive force a relink (the Go
// build cache does not hash archives named by #cgo LDFLAGS).
var LinkedLibSHA256 string

// HeaderABIVersion is the ABI version of the header this package was compiled against.
const HeaderABIVersion = uint32(C.INGERO_ABI_VERSION)

// Error is a failed library call.
type Error struct {
	Code uint32
	// Message is the library's detailed message (config errors: one `key.path: message`
	// per line), or the code's description.
	Message string
}

func (e *Error) Error() string { return e.Message }

// Lines splits a multi-error message (config validation) into one error per line.
func (e *Error) Lines() []error {
	var out []error
	for _, l := range strings.Split(e.Message, "\n") {
		if l != "" {
			out = append(out, errors.New(l))
		}
	}
	return out
}

// ErrClosed is returned by calls on a handle after Close.
var ErrClosed = errors.New("ingero: component handle already closed")

var abiErr = func() error {
	lib := uint32(C.ingero_abi_version())
	if lib != HeaderABIVersion {
		return fmt.Errorf("ingero: libingero_fleet ABI version %d does not match the header's %d: "+
			"rebuild the static library (go-shim/scripts/build-rust.sh) from the same checkout", lib, HeaderABIVersion)
	}
	return nil
}()

// CheckABI reports whether the linked library speaks the ABI this package was built for.
// Checked once at package init; every constructor refuses to run on a mismatch.
func CheckABI() error { return abiErr }

// Version is the linked library's version.
func Version() string { return C.GoString(C.ingero_version()) }

func codeMessage(rc C.ingero_result) string {
	return C.GoString(C.ingero_result_message(C.uint32_t(rc)))
}

// call runs one library call with the goroutine locked to its thread, so the thread-local
// last-error message belongs to this call.
func call(fn func() C.ingero_result) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return resultError(fn())
}

// resultError is the error of a result code; call it on the thread that made the call
// (still locked), as it reads the thread-local last error.
func resultError(rc C.ingero_result) error {
	if rc == C.INGERO_OK {
		return nil
	}
	if rc == C.INGERO_NO_THRESHOLD {
		return &Error{Code: uint32(rc), Message: codeMessage(rc)}
	}
	msg := lastError()
	if msg == "" {
		msg = codeMessage(rc)
	}
	return &Error{Code: uint32(rc), Message: msg}
}

func lastError() string {
	var b C.ingero_buf
	if C.ingero_last_error(&b) != C.INGERO_OK {
		return ""
	}
	return takeString(&b)
}

func takeBytes(b *C.ingero_buf) []byte {
	if b.ptr == nil {
		return nil
	}
	out := make([]byte, int(b.len))
	copy(out, unsafe.Slice((*byte)(unsafe.Pointer(b.ptr)), int(b.len)))
	C.ingero_buf_free(b)
	return out
}

func takeString(b *C.ingero_buf) string { return string(takeBytes(b)) }

// str passes a Go string's bytes for the duration of one call (no copy).
func str(s string) (*C.uint8_t, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

func bytesArg(b []byte) (*C.uint8_t, C.size_t) {
	if len(b) == 0 {
		return nil, 0
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0])), C.size_t(len(b))
}

// ValidateConfig validates a config (YAML or JSON bytes of the component's subtree; empty
// or "null" means defaults) for a component type, exactly as creating it would.
func ValidateConfig(componentType string, config []byte) error {
	if abiErr != nil {
		return abiErr
	}
	tp, tl := str(componentType)
	cp, cl := bytesArg(config)
	return call(func() C.ingero_result { return C.ingero_config_validate(tp, tl, cp, cl) })
}

// QueryCluster is the cluster a raw query string names ("" when none), by the Rust host's
// rules; a malformed or repeated cluster_id is an error with the host's 400 message.
func QueryCluster(rawQuery string) (string, error) {
	qp, ql := str(rawQuery)
	var b C.ingero_buf
	if err := call(func() C.ingero_result { return C.ingero_query_cluster(qp, ql, &b) }); err != nil {
		return "", err
	}
	return takeString(&b), nil
}

// ValidateHeaderClusterID checks a cluster id from a request header or gRPC metadata.
func ValidateHeaderClusterID(v string) error {
	p, l := str(v)
	return call(func() C.ingero_result { return C.ingero_validate_header_cluster_id(p, l) })
}

// ValidateClusterID checks a decoded cluster id (e.g. a resource attribute). Hot enough to
// skip the message: callers only need yes or no.
func ValidateClusterID(v string) bool {
	p, l := str(v)
	return C.ingero_validate_cluster_id(p, l) == C.INGERO_OK
}

// Processor is one Rust processor instance.
type Processor struct {
	mu sync.RWMutex
	h  *C.ingero_processor
}

// NewProcessor creates a processor from its id (`type[/name]`) and config bytes.
func NewProcessor(id string, config []byte) (*Processor, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	ip, il := str(id)
	cp, cl := bytesArg(config)
	var h *C.ingero_processor
	if err := call(func() C.ingero_result { return C.ingero_processor_new(ip, il, cp, cl, &h) }); err != nil {
		return nil, err
	}
	return &Processor{h: h}, nil
}

// Close frees the processor; later calls return ErrClosed.
func (p *Processor) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h != nil {
		C.ingero_processor_free(p.h)
		p.h = nil
	}
}

func (p *Processor) with(fn func(h *C.ingero_processor) error) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.h == nil {
		return ErrClosed
	}
	return fn(p.h)
}

// Start starts the processor with these extensions as the host's extension list.
func (p *Processor) Start(exts []*Extension) error {
	return p.with(func(h *C.ingero_processor) error {
		handles := make([]*C.ingero_extension, 0, len(exts))
		for _, e := range exts {
			e.mu.RLock()
			defer e.mu.RUnlock()
			if e.h == nil {
				return ErrClosed
			}
			handles = append(handles, e.h)
		}
		var list **C.ingero_extension
		if len(handles) > 0 {
			list = &handles[0]
		}
		return call(func() C.ingero_result {
			return C.ingero_processor_start(h, list, C.size_t(len(handles)))
		})
	})
}

// Shutdown stops the processor (idempotent).
func (p *Processor) Shutdown() error {
	return p.with(func(h *C.ingero_processor) error {
		return call(func() C.ingero_result { return C.ingero_processor_shutdown(h) })
	})
}

// ProcessResult is what one batch produced.
type ProcessResult struct {
	// Modified: Data holds the new batch (MetricsData protobuf). Otherwise keep the input.
	Modified       bool
	Data           []byte
	RejectedPoints uint64
}

// Process runs one OTLP protobuf batch through the processor: one cgo call. The batch is
// passed in place (no copy into C memory: it holds no Go pointers and Rust reads it only
// during the call). Written out without the closures of `with`/`call` (same locking, same
// thread pinning, same errors): this is the per-batch hot path.
func (p *Processor) Process(batch []byte, clusterID string, receivedAt time.Time) (ProcessResult, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.h == nil {
		return ProcessResult{}, ErrClosed
	}
	dp, dl := bytesArg(batch)
	cp, cl := str(clusterID)
	var out C.ingero_process_result
	runtime.LockOSThread()
	rc := C.ingero_processor_process(p.h, dp, dl, cp, cl, C.uint64_t(receivedAt.UnixNano()), &out)
	err := resultError(rc)
	runtime.UnlockOSThread()
	if err != nil {
		return ProcessResult{}, err
	}
	return ProcessResult{
		Modified:       bool(out.modified),
		RejectedPoints: uint64(out.rejected_points),
		Data:           takeBytes(&out.data),
	}, nil
}

// Tick runs the periodic work at now; the result is MetricsData protobuf (nil when the
// tick emitted nothing).
func (p *Processor) Tick(now time.Time) ([]byte, error) {
	var data []byte
	err := p.with(func(h *C.ingero_processor) error {
		var b C.ingero_buf
		if err := call(func() C.ingero_result { return C.ingero_processor_tick(h, C.uint64_t(now.UnixNano()), &b) }); err != nil {
			return err
		}
		data = takeBytes(&b)
		return nil
	})
	return data, err
}

// TickInterval is how often Tick should run.
func (p *Processor) TickInterval() (time.Duration, error) {
	var d time.Duration
	err := p.with(func(h *C.ingero_processor) error {
		var n C.uint64_t
		if err := call(func() C.ingero_result { return C.ingero_processor_tick_interval_nanos(h, &n) }); err != nil {
			return err
		}
		d = time.Duration(n)
		return nil
	})
	return d, err
}

// TelemetryJSON is the processor's self-metrics as JSON families.
func (p *Processor) TelemetryJSON() ([]byte, error) {
	return p.jsonCall(func(h *C.ingero_processor, b *C.ingero_buf) C.ingero_result {
		return C.ingero_processor_telemetry_json(h, b)
	})
}

// DiagnosticsJSON is the processor's diagnostics (`null` when none).
func (p *Processor) DiagnosticsJSON() ([]byte, error) {
	return p.jsonCall(func(h *C.ingero_processor, b *C.ingero_buf) C.ingero_result {
		return C.ingero_processor_diagnostics_json(h, b)
	})
}

func (p *Processor) jsonCall(fn func(*C.ingero_processor, *C.ingero_buf) C.ingero_result) ([]byte, error) {
	var data []byte
	err := p.with(func(h *C.ingero_processor) error {
		var b C.ingero_buf
		if err := call(func() C.ingero_result { return fn(h, &b) }); err != nil {
			return err
		}
		data = takeBytes(&b)
		return nil
	})
	return data, err
}

// Extension is one Rust `ingero_threshold` extension instance.
type Extension struct {
	mu sync.RWMutex
	h  *C.ingero_extension
}

// NewExtension creates an extension from its id (`ingero_threshold[/name]`) and config.
func NewExtension(id string, config []byte) (*Extension, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	ip, il := str(id)
	cp, cl := bytesArg(config)
	var h *C.ingero_extension
	if err := call(func() C.ingero_result { return C.ingero_extension_new(ip, il, cp, cl, &h) }); err != nil {
		return nil, err
	}
	return &Extension{h: h}, nil
}

// Close frees the extension; processors started with it keep its store alive.
func (e *Extension) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h != nil {
		C.ingero_extension_free(e.h)
		e.h = nil
	}
}

func (e *Extension) with(fn func(h *C.ingero_extension) error) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.h == nil {
		return ErrClosed
	}
	return fn(e.h)
}

// Start starts the extension (idempotent).
func (e *Extension) Start() error {
	return e.with(func(h *C.ingero_extension) error {
		return call(func() C.ingero_result { return C.ingero_extension_start(h) })
	})
}

// Shutdown stops the extension (idempotent; thresholds stay readable).
func (e *Extension) Shutdown() error {
	return e.with(func(h *C.ingero_extension) error {
		return call(func() C.ingero_result { return C.ingero_extension_shutdown(h) })
	})
}

// ConfigJSON is the effective config with defaults.
func (e *Extension) ConfigJSON() ([]byte, error) {
	return e.jsonCall(func(h *C.ingero_extension, b *C.ingero_buf) C.ingero_result {
		return C.ingero_extension_config_json(h, b)
	})
}

// TelemetryJSON is the extension's self-metrics as JSON families.
func (e *Extension) TelemetryJSON() ([]byte, error) {
	return e.jsonCall(func(h *C.ingero_extension, b *C.ingero_buf) C.ingero_result {
		return C.ingero_extension_telemetry_json(h, b)
	})
}

func (e *Extension) jsonCall(fn func(*C.ingero_extension, *C.ingero_buf) C.ingero_result) ([]byte, error) {
	var data []byte
	err := e.with(func(h *C.ingero_extension) error {
		var b C.ingero_buf
		if err := call(func() C.ingero_result { return fn(h, &b) }); err != nil {
			return err
		}
		data = takeBytes(&b)
		return nil
	})
	return data, err
}

// Threshold is a cluster's deliverable threshold; ok is false when there is none.
func (e *Extension) Threshold(clusterID string) (threshold float64, quorumMet bool, ok bool, err error) {
	err = e.with(func(h *C.ingero_extension) error {
		cp, cl := str(clusterID)
		var t C.ingero_threshold
		rc := C.ingero_extension_threshold(h, cp, cl, &t)
		switch rc {
		case C.INGERO_OK:
			threshold, quorumMet, ok = float64(t.threshold), bool(t.quorum_met), true
			return nil
		case C.INGERO_NO_THRESHOLD:
			return nil
		default:
			return &Error{Code: uint32(rc), Message: codeMessage(rc)}
		}
	})
	return threshold, quorumMet, ok, err
}

// PushHeaders are the two response header values of a cluster.
type PushHeaders struct {
	Threshold string
	QuorumMet string
}

// PushHeaders looks up the header values for a validated cluster id: ok is false when the
// cluster has none (send neither header). One cgo call, no allocation in Rust.
func (e *Extension) PushHeaders(clusterID string) (h PushHeaders, ok bool, err error) {
	err = e.with(func(eh *C.ingero_extension) error {
		cp, cl := str(clusterID)
		var out C.ingero_push_headers
		rc := C.ingero_extension_push_headers(eh, cp, cl, &out)
		switch rc {
		case C.INGERO_OK:
			h.Threshold = C.GoStringN((*C.char)(unsafe.Pointer(&out.threshold[0])), C.int(out.threshold_len))
			h.QuorumMet = C.GoStringN((*C.char)(unsafe.Pointer(&out.quorum_met[0])), C.int(out.quorum_met_len))
			ok = true
			return nil
		case C.INGERO_NO_THRESHOLD:
			return nil
		default:
			return &Error{Code: uint32(rc), Message: codeMessage(rc)}
		}
	})
	return h, ok, err
}

// Response is one routed HTTP response.
type Response struct {
	Status      int
	ContentType string
	// Headers are extra response headers in order (name, value).
	Headers [][2]string
	Body    []byte
}

// RouteAgent answers a request to the agent listener (GET /api/v1/threshold).
func (e *Extension) RouteAgent(method, path, rawQuery string) (Response, error) {
	return e.route(false, method, path, rawQuery)
}

// RouteAdmin answers a request to the admin listener (GET /api/v1/diagnostics).
func (e *Extension) RouteAdmin(method, path, rawQuery string) (Response, error) {
	return e.route(true, method, path, rawQuery)
}

func (e *Extension) route(admin bool, method, path, rawQuery string) (Response, error) {
	var resp Response
	err := e.with(func(h *C.ingero_extension) error {
		mp, ml := str(method)
		pp, pl := str(path)
		qp, ql := str(rawQuery)
		var r C.ingero_http_response
		err := call(func() C.ingero_result {
			if admin {
				return C.ingero_extension_route_admin(h, mp, ml, pp, pl, qp, ql, &r)
			}
			return C.ingero_extension_route_agent(h, mp, ml, pp, pl, qp, ql, &r)
		})
		if err != nil {
			return err
		}
		resp.Status = int(r.status)
		resp.ContentType = string(bufBytes(&r.content_type))
		for _, line := range strings.Split(string(bufBytes(&r.headers)), "\n") {
			if name, value, ok := strings.Cut(line, ": "); ok {
				resp.Headers = append(resp.Headers, [2]string{name, value})
			}
		}
		resp.Body = bufBytes(&r.body)
		C.ingero_http_response_free(&r)
		return nil
	})
	return resp, err
}

// bufBytes copies a buffer without freeing it.
func bufBytes(b *C.ingero_buf) []byte {
	if b.ptr == nil {
		return []byte{}
	}
	out := make([]byte, int(b.len))
	copy(out, unsafe.Slice((*byte)(unsafe.Pointer(b.ptr)), int(b.len)))
	return out
}
