package rpc

import (
	"errors"
	"fmt"
)

// Error codes that this package puts in responses itself. Handlers choose
// their own codes for everything else (see Errorf).
const (
	// CodeInternal is sent when a handler fails with an error that carries no
	// code of its own, or panics.
	CodeInternal = "internal"
	// CodeUnknownMethod is sent when no handler is registered for the method.
	CodeUnknownMethod = "unknown_method"
	// CodeFrameTooLarge is sent when the handler's response would not fit in
	// a frame of Config.MaxFrameSize bytes.
	CodeFrameTooLarge = "frame_too_large"
	// CodeBadRequest is the code of errors returned by Decode, so a handler
	// that returns Decode's error as it is tells the caller that its request
	// was malformed rather than that the server failed.
	CodeBadRequest = "bad_request"
	// CodeGoingAway is sent, with request ID 0, by a server that closes an
	// idle connection (Config.ServerIdleTimeout, Config.MaxConns): it read
	// nothing after the requests it answered, so a Client sends the calls
	// it had in flight again on a new connection.
	CodeGoingAway = "going_away"
)

var (
	// ErrUnreachable is wrapped by the errors of Call when the peer could not
	// be dialed, the handshake failed, or the connection broke before the
	// reply arrived. The request may or may not have run; callers fail over
	// to another replica (writes in tsdht are idempotent).
	ErrUnreachable = errors.New("rpc: peer unreachable")

	// ErrFrameTooLarge is returned when a request or response would exceed
	// Config.MaxFrameSize. A request that is too large is never sent; a
	// response that is too large arrives as a *RemoteError with code
	// CodeFrameTooLarge, which errors.Is also matches with ErrFrameTooLarge.
	ErrFrameTooLarge = errors.New("rpc: frame too large")

	// ErrVersionMismatch is wrapped by handshake errors when the two sides
	// share no protocol version.
	ErrVersionMismatch = errors.New("rpc: protocol version mismatch")

	// ErrClusterKey is wrapped by handshake errors when the two sides do not
	// share a cluster key: one has none, or neither accepts the other's, or a
	// proof was wrong. The error says which; the fix is the same
	// --cluster-key-file on both sides (see docs/security.md). Calls that fail
	// with it also wrap ErrUnreachable.
	ErrClusterKey = errors.New("rpc: cluster key refused")

	// ErrClosed is returned by calls on a closed Client and by Listen on a
	// closed Server.
	ErrClosed = errors.New("rpc: closed")
)

// RemoteError is the error a handler returned, as the caller receives it.
type RemoteError struct {
	Code string // machine-readable, e.g. "bad_input"; never empty
	Msg  string // the handler's error message
}

// Error returns the handler's message unchanged, so it can be shown to a user
// as is.
func (e *RemoteError) Error() string { return e.Msg }

// ErrorCode returns e.Code. A handler may return a *RemoteError it got from
// another call and the code travels on.
func (e *RemoteError) ErrorCode() string { return e.Code }

// Is lets errors.Is(err, ErrFrameTooLarge) hold for a response that was too
// large to send.
func (e *RemoteError) Is(target error) bool {
	return target == ErrFrameTooLarge && e.Code == CodeFrameTooLarge
}

// Errorf returns a *RemoteError with the given code and formatted message,
// for handlers that want the caller to see a specific code.
func Errorf(code, format string, args ...any) error {
	return &RemoteError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// errorCode is the code to send for an error returned by a handler: the
// error's own code if it (or an error it wraps) has one, else CodeInternal.
func errorCode(err error) string {
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		if code := coded.ErrorCode(); code != "" {
			return code
		}
	}
	return CodeInternal
}
