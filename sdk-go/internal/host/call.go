package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// call runs one rpc under the Services' context and timeout and turns a failure into
// a *HostError naming method (`Settings.Get`).
func call[Req, Resp any](s *Services, method string, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx := s.ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	resp, err := rpc(ctx, req)
	if err != nil {
		var zero Resp
		return zero, s.fail(method, err)
	}
	return resp, nil
}

// fail wraps an rpc error in a *HostError (its status as is; UNIMPLEMENTED gets a
// hint, as in the other SDKs).
func (s *Services) fail(method string, err error) *HostError {
	var he *HostError
	if errors.As(err, &he) {
		return he
	}
	st := status.Convert(err)
	if st.Code() == codes.Unimplemented {
		st = status.New(codes.Unimplemented, st.Message()+" (the broker does not serve this host service)")
	}
	return &HostError{Plugin: s.plugin, Method: method, st: st}
}

// logged logs err of a seed method without an error result.
func (s *Services) logged(err error) {
	if err != nil {
		s.logf("hearth-plugin: %v", err)
	}
}

// toJSON is the JSON text of v for the wire: encoding/json without HTML escaping
// (as the other SDKs write `<`), no trailing newline.
func (s *Services) toJSON(method string, v interface{}) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", NewHostError(s.plugin, method, codes.InvalidArgument, fmt.Sprintf("value is not JSON: %v", err))
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// fromJSON decodes the broker's JSON text into out (empty text leaves out as is).
func (s *Services) fromJSON(method, text string, out interface{}) error {
	if text == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(text), out); err != nil {
		return NewHostError(s.plugin, method, codes.Internal, fmt.Sprintf("the broker sent invalid JSON: %v", err))
	}
	return nil
}

// object decodes a JSON object (empty text or null = an empty, non-nil map).
func (s *Services) object(method, text string) (map[string]interface{}, error) {
	var m map[string]interface{}
	if err := s.fromJSON(method, text, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return m, nil
}

// count turns a Go int argument into the wire's uint32 (negative = 0).
func count(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > 0xFFFFFFFF:
		return 0xFFFFFFFF
	}
	return uint32(n)
}

var codeNames = map[codes.Code]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// CodeName is the status name as the gRPC spec and the other SDKs write it:
// NOT_FOUND for codes.NotFound, and so on (`CODE(17)` for an unknown code).
func CodeName(c codes.Code) string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("CODE(%d)", uint32(c))
}

// The concrete values implement the seed interfaces and their twins.
var (
	_ SettingsAPIE  = settingsAPI{}
	_ MemoryAPIE    = memoryAPI{}
	_ TextMemoryAPI = textMemoryAPI{}
	_ DocMemoryAPIE = docMemoryAPI{}
	_ KnowledgeAPI  = knowledgeAPI{}
	_ LLMAPIE       = llmAPI{}
	_ IOInjectorE   = inputAPI{}
	_ McpAPI        = mcpAPI{}
)
