// Package ckpt is the Go binding of libckpt, a distributed checkpointing runtime.
//
// Every process of a job (a rank) creates one Context, registers in a State the shards of the global tensors it
// holds, and calls Save or Load together with the other ranks. Any number of ranks, in any layout, can load what
// any other layout saved. Save returns once the state is staged; the SaveRequest it returns reports when the
// checkpoint is committed. A Manager keeps numbered steps under one root directory, with a latest pointer and
// retention, and resumes from the latest. A Reader inspects a checkpoint from any single process, and Export
// writes one out as safetensors.
//
// # Memory
//
// libckpt reads and writes tensor data after the call that registered it has returned, and Go's cgo rules forbid
// C from keeping pointers to Go memory past a call. Tensor and object data therefore live in a Buffer, memory
// allocated by C. A State holds a reference to every Buffer registered in it, so closing a Buffer early only
// defers its release until the State is closed; but slices returned by a Buffer's views (Float32s, Bytes, ...)
// must not be used after the Buffer is released.
//
// # Resources
//
// Context, Manager, State, SaveRequest, Reader and Buffer own C resources: Close them when done. Finalizers free a
// forgotten Context, Manager, State, SaveRequest or Reader as a safety net, but only Close frees them at a known
// time. Closing a Context closes its Managers and SaveRequests first.
// A Buffer has no finalizer, because its views may outlive every reference to the Buffer itself.
//
// # Concurrency
//
// Every method may be called from any goroutine; calls on one handle are serialised, and so are the calls of a
// Context and its Managers. Collective calls (NewContext, Save, Load, OpenManager, Manager.Save,
// Manager.LoadLatest) must be made by every rank in the same order.
package ckpt

/*
#cgo pkg-config: ckpt
#include <ckpt.h>
*/
import "C"

// MaxNdim is the largest number of dimensions of a tensor or object grid.
const MaxNdim = C.CKPT_MAX_NDIM

// Version is the version of the libckpt loaded at run time, as "major.minor.patch".
func Version() string {
	return C.GoString(C.ckpt_version_string())
}
