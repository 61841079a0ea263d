package ckpt

/*
#include <ckpt.h>
*/
import "C"

import "fmt"

// Status codes of libckpt, with their pinned C values.
const (
	StatusOK              int32 = C.CKPT_OK
	StatusInvalidArgument int32 = C.CKPT_E_INVALID_ARGUMENT
	StatusNotFound        int32 = C.CKPT_E_NOT_FOUND
	StatusAlreadyExists   int32 = C.CKPT_E_ALREADY_EXISTS
	StatusMismatch        int32 = C.CKPT_E_MISMATCH
	StatusCorrupt         int32 = C.CKPT_E_CORRUPT
	StatusVersion         int32 = C.CKPT_E_VERSION
	StatusIO              int32 = C.CKPT_E_IO
	StatusNoSpace         int32 = C.CKPT_E_NO_SPACE
	StatusTimeout         int32 = C.CKPT_E_TIMEOUT
	StatusPeerFailed      int32 = C.CKPT_E_PEER_FAILED
	StatusUnsupported     int32 = C.CKPT_E_UNSUPPORTED
	StatusNoMemory        int32 = C.CKPT_E_NO_MEMORY
	StatusInProgress      int32 = C.CKPT_E_IN_PROGRESS
	StatusInternal        int32 = C.CKPT_E_INTERNAL
)

// Error is a failed libckpt call: its status code and the library's message naming what is wrong.
//
// errors.Is(err, target) holds when target is an *Error with the same Status, so the sentinels below classify
// any error of this package: errors.Is(err, ckpt.ErrNotFound).
type Error struct {
	Status  int32
	Message string
}

// Sentinels, one per status, for errors.Is.
var (
	ErrInvalidArgument = &Error{Status: StatusInvalidArgument}
	ErrNotFound        = &Error{Status: StatusNotFound}
	ErrAlreadyExists   = &Error{Status: StatusAlreadyExists}
	ErrMismatch        = &Error{Status: StatusMismatch}
	ErrCorrupt         = &Error{Status: StatusCorrupt}
	ErrVersion         = &Error{Status: StatusVersion}
	ErrIO              = &Error{Status: StatusIO}
	ErrNoSpace         = &Error{Status: StatusNoSpace}
	ErrTimeout         = &Error{Status: StatusTimeout}
	ErrPeerFailed      = &Error{Status: StatusPeerFailed}
	ErrUnsupported     = &Error{Status: StatusUnsupported}
	ErrNoMemory        = &Error{Status: StatusNoMemory}
	ErrInProgress      = &Error{Status: StatusInProgress}
	ErrInternal        = &Error{Status: StatusInternal}
)

// StatusString is libckpt's short description of a status code, such as "CKPT_E_CORRUPT: corrupt or truncated
// data".
func StatusString(status int32) string {
	return C.GoString(C.ckpt_status_string(C.int32_t(status)))
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "ckpt: " + StatusString(e.Status)
	}
	return "ckpt: " + e.Message
}

// Is reports whether target is an *Error of the same status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status
}

// invalidArgument is the error for arguments this package refuses before calling libckpt.
func invalidArgument(format string, args ...any) error {
	return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// closedHandle is the error for a method called on a handle after its Close.
func closedHandle(kind string) error {
	return invalidArgument("%s is closed", kind)
}

// call runs one libckpt function with a fresh error object and turns its status into an *Error. Each call gets
// its own error object because libckpt has no thread-local error state and goroutines move between threads.
func call(fn func(cerr *C.ckpt_error_t) C.int32_t) error {
	var cerr *C.ckpt_error_t
	if C.ckpt_error_create(&cerr) != C.CKPT_OK {
		return &Error{Status: StatusNoMemory, Message: "cannot allocate a ckpt error object"}
	}
	defer C.ckpt_error_free(cerr)
	if status := fn(cerr); status != C.CKPT_OK {
		return &Error{Status: int32(status), Message: C.GoString(C.ckpt_error_message(cerr))}
	}
	return nil
}
