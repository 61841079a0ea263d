package ckpt

/*
#include "binding.h"
*/
import "C"

import (
	"runtime/cgo"
	"strconv"
	"unsafe"
)

// Phase is the phase of a save or a load that a progress callback reports (CKPT_PHASE_*).
type Phase int32

const (
	// PhasePlanning: save and load, agreeing with the other ranks on who writes or reads what (0 of 0 bytes).
	PhasePlanning Phase = C.CKPT_PHASE_PLANNING
	// PhaseStaging: save, copying this rank's bytes into the staging arena (Save blocks).
	PhaseStaging Phase = C.CKPT_PHASE_STAGING
	// PhaseWriting: save, the I/O workers write them until they are durable.
	PhaseWriting Phase = C.CKPT_PHASE_WRITING
	// PhaseCommitting: save, waiting for every rank's writes, then the manifest and the rename.
	PhaseCommitting Phase = C.CKPT_PHASE_COMMITTING
	// PhaseCommitted: save, committed; the last call, Done == Total.
	PhaseCommitted Phase = C.CKPT_PHASE_COMMITTED
	// PhaseReading: load, filling this rank's tensor buffers.
	PhaseReading Phase = C.CKPT_PHASE_READING
	// PhaseLoaded: load, every rank's buffers are filled; the last call, Done == Total.
	PhaseLoaded Phase = C.CKPT_PHASE_LOADED
	// PhaseFailed: save or load, failed (the request or the call returns why); the last call.
	PhaseFailed Phase = C.CKPT_PHASE_FAILED
)

func (p Phase) String() string {
	names := [...]string{"planning", "staging", "writing", "committing", "committed", "reading", "loaded", "failed"}
	if p >= 0 && int(p) < len(names) {
		return names[p]
	}
	return "phase " + strconv.Itoa(int(p))
}

// Progress is Done of Total bytes of this rank in Phase.
type Progress struct {
	Phase       Phase
	Done, Total uint64
}

// progressHandle holds a Go progress callback for the library: a cgo.Handle, since C may keep no Go pointer.
// Delete it once no call can come: after a load returns, after a save's request is freed.
type progressHandle struct {
	handle cgo.Handle
}

// newProgressHandle returns nil for a nil callback.
func newProgressHandle(report func(Progress)) *progressHandle {
	if report == nil {
		return nil
	}
	return &progressHandle{cgo.NewHandle(report)}
}

// cParts is (progress, progress_user) for the C options.
func (h *progressHandle) cParts() (C.ckpt_progress_fn, unsafe.Pointer) {
	return C.ckpt_go_progress_fn(), C.ckpt_go_handle_pointer(C.uintptr_t(h.handle))
}

func (h *progressHandle) delete() {
	if h != nil {
		h.handle.Delete()
	}
}
