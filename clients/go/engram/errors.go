package engram

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the ErrorInfo domain of engram's own errors.
const ErrorDomain = "engram.dev"

// Error is a failed call: its status code and message, and what engram's details say (the
// google.rpc.Status in the grpc-status-details-bin trailer). Every call through a Client
// returns one on failure; status.Code(err) still works on it.
type Error struct {
	Code    codes.Code
	Message string
	// Reason is ErrorInfo's UPPER_SNAKE reason, such as ETAG_MISMATCH or RATE_LIMITED; empty
	// when the status carries no engram ErrorInfo (the transport failed, or a deadline passed).
	Reason string
	// Metadata is ErrorInfo's metadata, e.g. current_sha256 for ETAG_MISMATCH.
	Metadata map[string]string
	// RetryDelay is RetryInfo's delay (RATE_LIMITED): wait that long before trying again.
	RetryDelay time.Duration
	// Field is the BadRequest field a refused argument names.
	Field  string
	status *status.Status
}

func (e *Error) Error() string {
	text := fmt.Sprintf("%s: %s", codeName(e.Code), e.Message)
	if e.Reason != "" {
		text += " [" + e.Reason + "]"
	}
	return text
}

// GRPCStatus lets status.FromError and status.Code see the original status.
func (e *Error) GRPCStatus() *status.Status {
	return e.status
}

// FromStatus decodes a status and its details into an *Error.
func FromStatus(s *status.Status) *Error {
	failure := &Error{Code: s.Code(), Message: s.Message(), Metadata: map[string]string{}, status: s}
	for _, detail := range s.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == ErrorDomain {
				failure.Reason = d.GetReason()
				for k, v := range d.GetMetadata() {
					failure.Metadata[k] = v
				}
			}
		case *errdetails.RetryInfo:
			failure.RetryDelay = d.GetRetryDelay().AsDuration()
		case *errdetails.BadRequest:
			if violations := d.GetFieldViolations(); len(violations) > 0 {
				failure.Field = violations[0].GetField()
			}
		}
	}
	return failure
}

// asError turns a call's error into an *Error (nil and io.EOF pass through unchanged).
func asError(err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	s, ok := status.FromError(err)
	if !ok {
		return err // io.EOF at a stream's end, or a client-side error without a status
	}
	return FromStatus(s)
}

// codes.Code's String() is "Aborted"; engram, the CLI and the Python client say ABORTED.
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

func codeName(c codes.Code) string {
	if name, ok := codeNames[c]; ok {
		return name
	}
	return c.String()
}

// CodeName is the canonical upper-case name of a status code ("ABORTED").
func CodeName(c codes.Code) string {
	return codeName(c)
}

func unaryErrors(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return asError(invoker(ctx, method, req, reply, cc, opts...))
}

func streamErrors(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	stream, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, asError(err)
	}
	return errorStream{stream}, nil
}

// errorStream returns each message's failure as an *Error too.
type errorStream struct {
	grpc.ClientStream
}

func (s errorStream) RecvMsg(m any) error {
	return asError(s.ClientStream.RecvMsg(m))
}

func (s errorStream) SendMsg(m any) error {
	return asError(s.ClientStream.SendMsg(m))
}

func (s errorStream) CloseSend() error {
	return asError(s.ClientStream.CloseSend())
}
