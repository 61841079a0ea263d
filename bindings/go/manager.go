package ckpt

/*
#include <stdlib.h>
#include "binding.h"
*/
import "C"

import (
	"errors"
	"runtime"
	"time"
	"unsafe"
)

// BestMode says which scores ManagerOptions.KeepBest keeps.
type BestMode int32

const (
	BestMax BestMode = C.CKPT_BEST_MAX // the highest SaveOptions.BestValue
	BestMin BestMode = C.CKPT_BEST_MIN // the lowest, as for a loss
)

// ManagerOptions say which committed steps a Manager keeps, and which tier its steps go to; nil keeps every step,
// on storage. A step is kept if any rule keeps it (as Orbax's preservation policies combine); with none of
// KeepLast, KeepBest and KeepFor, every step is kept. The newest step is always kept, since a resume needs it. Rank
// 0 removes the others on a thread of its own, never delaying a save.
type ManagerOptions struct {
	// KeepLast keeps the newest KeepLast committed steps (0: no such rule).
	KeepLast uint32
	// KeepEvery keeps every step divisible by KeepEvery (0: no such rule; Orbax's keep_period).
	KeepEvery uint64
	// KeepBest keeps the KeepBest steps of best SaveOptions.BestValue by BestMode (0: no such rule); a step saved
	// without one is judged by the other rules alone.
	KeepBest uint32
	BestMode BestMode
	// KeepFor keeps the steps committed within the last KeepFor (by rank 0's clock, in whole seconds rounded up;
	// 0: no such rule); a step saved without a manager or through the memory tier is judged by the other rules.
	KeepFor time.Duration
	// MemoryTier sends every step to the memory tier (TierMemory: the node agent's shared memory, which outlives
	// the trainers), and the steps divisible by StorageEvery to storage as well (TierBoth). LoadLatest resumes
	// from the newest step of either tier. The job needs an identity: CKPT_JOB_ID (see Tier).
	MemoryTier bool
	// StorageEvery, with MemoryTier: the steps divisible by it also go to storage, written there by the agent in
	// the background (0: a step reaches storage only when the trainers die).
	StorageEvery uint64
}

// toC gives the C options, or why these cannot be.
func (o *ManagerOptions) toC() (C.ckpt_manager_options, error) {
	copts := C.ckpt_go_manager_options()
	if o == nil {
		return copts, nil
	}
	if o.StorageEvery != 0 && !o.MemoryTier {
		return copts, invalidArgument("StorageEvery applies to the memory tier: set MemoryTier too (without it, " +
			"every step goes to storage)")
	}
	if o.KeepFor < 0 {
		return copts, invalidArgument("KeepFor must not be negative, not %v", o.KeepFor)
	}
	copts.keep_last = C.uint32_t(o.KeepLast)
	copts.keep_every = C.uint64_t(o.KeepEvery)
	copts.keep_best = C.uint32_t(o.KeepBest)
	copts.best_mode = C.int32_t(o.BestMode)
	copts.keep_for_seconds = C.uint64_t((o.KeepFor + time.Second - 1) / time.Second)
	if o.MemoryTier {
		copts.memory_tier = 1
	}
	copts.storage_every = C.uint64_t(o.StorageEvery)
	return copts, nil
}

// Manager is a root directory of numbered steps (root/step-<12 digits>) that the ranks save into and resume from
// together. Once a save through the manager commits, rank 0 moves the latest pointer to it and removes the steps
// that the retention policy no longer keeps. Close it before its Context (Context.Close closes it otherwise).
type Manager struct {
	ctx *Context
	ptr *C.ckpt_manager_t // guarded by ctx.mu
}

// The first buffer size tried for a step's path, and the largest: a longer path is refused.
const (
	stepPathFirstBuffer = 256
	stepPathMaxBuffer   = 1 << 20
)

// OpenManager opens root as a directory of steps, creating it if needed. Collective. Rank 0 first removes the
// uncommitted step directories that crashed runs left behind.
func (c *Context) OpenManager(root string, opts *ManagerOptions) (*Manager, error) {
	var allocs cAllocs
	defer allocs.free()
	croot, err := allocs.str("manager root", root)
	if err != nil {
		return nil, err
	}
	copts, err := opts.toC()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return nil, closedHandle("Context")
	}
	var ptr *C.ckpt_manager_t
	if err := call(func(cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_manager_open(c.ptr, croot, &copts, &ptr, cerr)
	}); err != nil {
		return nil, err
	}
	m := &Manager{ctx: c, ptr: ptr}
	c.managers[m] = struct{}{}
	runtime.SetFinalizer(m, (*Manager).Close)
	return m, nil
}

// Save saves state as step `step`, as Context.Save does: it returns once the state's Buffers are staged.
// Collective. The step becomes the latest only if the request succeeds; a failed save leaves the latest pointer
// and the kept steps untouched. The options' Tier overrides the manager's memory tier policy when it is TierMemory
// or TierBoth.
func (m *Manager) Save(state *State, step uint64, opts *SaveOptions) (*SaveRequest, error) {
	return m.ctx.startSave(state, opts, func(copts *C.ckpt_save_options, request **C.ckpt_request_t) error {
		if m.ptr == nil {
			return closedHandle("Manager")
		}
		return call(func(cerr *C.ckpt_error_t) C.int32_t {
			return C.ckpt_manager_save(m.ptr, state.ptr, C.uint64_t(step), copts, request, cerr)
		})
	})
}

// Latest returns the newest committed step on storage, or an error matching ErrNotFound if there is none yet. Not
// collective.
func (m *Manager) Latest() (uint64, error) {
	var step C.uint64_t
	err := m.withHandle(func() error {
		return call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_manager_latest(m.ptr, &step, cerr) })
	})
	return uint64(step), err
}

// Steps returns every committed step under the root, ascending. Not collective.
func (m *Manager) Steps() ([]uint64, error) {
	var steps []uint64
	err := m.withHandle(func() error {
		var count C.uint64_t
		if err := call(func(cerr *C.ckpt_error_t) C.int32_t {
			return C.ckpt_manager_steps(m.ptr, nil, 0, &count, cerr)
		}); err != nil {
			return err
		}
		for {
			capacity := count
			buffer := C.malloc(C.size_t(capacity+1) * C.size_t(unsafe.Sizeof(C.uint64_t(0))))
			if buffer == nil {
				return &Error{Status: StatusNoMemory, Message: "allocating the list of steps"}
			}
			err := call(func(cerr *C.ckpt_error_t) C.int32_t {
				return C.ckpt_manager_steps(m.ptr, (*C.uint64_t)(buffer), capacity, &count, cerr)
			})
			if err == nil && count <= capacity {
				found := unsafe.Slice((*C.uint64_t)(buffer), int(count))
				steps = make([]uint64, count)
				for i, step := range found {
					steps[i] = uint64(step)
				}
			}
			C.free(buffer)
			if err != nil || steps != nil {
				return err
			}
		}
	})
	return steps, err
}

// ResumeStep returns the step LoadLatest would load, the same on every rank, without loading it: the latest on
// storage (as rank 0 sees it), or the newest step the job's node agents hold in memory when it is at least as new,
// which Latest does not see. Collective. With no committed step yet, every rank gets an error matching
// ErrNotFound: a fresh start.
func (m *Manager) ResumeStep() (uint64, error) {
	var step C.uint64_t
	err := m.withHandle(func() error {
		return call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_manager_resume_step(m.ptr, &step, cerr) })
	})
	return uint64(step), err
}

// LoadLatest loads the latest step (as rank 0 sees it) into state and returns it. Collective. The newest step the
// node's agent holds in memory counts too, and is read from memory when it is at least as new as the latest on
// storage. With no committed step yet, every rank gets an error matching ErrNotFound: a fresh start.
func (m *Manager) LoadLatest(state *State, opts *LoadOptions) (uint64, error) {
	copts, progress, err := opts.toC()
	if err != nil {
		return 0, err
	}
	defer progress.delete()
	var step C.uint64_t
	err = m.ctx.withState(state, func() error {
		if m.ptr == nil {
			return closedHandle("Manager")
		}
		return call(func(cerr *C.ckpt_error_t) C.int32_t {
			return C.ckpt_manager_load_latest(m.ptr, state.ptr, &copts, &step, cerr)
		})
	})
	return uint64(step), err
}

// StepPath returns the directory of step `step`, whether or not it exists.
func (m *Manager) StepPath(step uint64) (string, error) {
	for size := stepPathFirstBuffer; ; size *= 2 {
		path, err := m.stepPathWithin(step, size)
		// The only argument that can be wrong is the buffer's size: retry with a larger one.
		if !errors.Is(err, ErrInvalidArgument) || size >= stepPathMaxBuffer {
			return path, err
		}
	}
}

func (m *Manager) stepPathWithin(step uint64, size int) (string, error) {
	buffer := (*C.char)(C.malloc(C.size_t(size)))
	if buffer == nil {
		return "", &Error{Status: StatusNoMemory, Message: "cannot allocate the step path's buffer"}
	}
	defer C.free(unsafe.Pointer(buffer))
	err := m.withHandle(func() error {
		return call(func(cerr *C.ckpt_error_t) C.int32_t {
			return C.ckpt_manager_step_path(m.ptr, C.uint64_t(step), buffer, C.uint64_t(size), cerr)
		})
	})
	if err != nil {
		return "", err
	}
	return C.GoString(buffer), nil
}

// Wait waits for the manager's saves in flight and, on rank 0, for the removals of old steps their commits asked
// for, which otherwise go on in the background (ResumeStep waits for them too). Not collective; a save's failure is
// its request's to report.
func (m *Manager) Wait() error {
	return m.withHandle(func() error {
		return call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_manager_wait(m.ptr, cerr) })
	})
}

// Metrics returns the metrics saved with step (SaveOptions.Metrics), the text of a JSON object; ErrNotFound if
// the step was saved without any or is not committed. Not collective.
func (m *Manager) Metrics(step uint64) (string, error) {
	var metrics string
	err := m.withHandle(func() error {
		var length C.uint64_t
		if err := call(func(cerr *C.ckpt_error_t) C.int32_t {
			return C.ckpt_manager_metrics(m.ptr, C.uint64_t(step), nil, 0, &length, cerr)
		}); err != nil {
			return err
		}
		buffer := (*C.char)(C.malloc(C.size_t(length + 1)))
		if buffer == nil {
			return &Error{Status: StatusNoMemory, Message: "cannot allocate the metrics' buffer"}
		}
		defer C.free(unsafe.Pointer(buffer))
		if err := call(func(cerr *C.ckpt_error_t) C.int32_t {
			return C.ckpt_manager_metrics(m.ptr, C.uint64_t(step), buffer, length+1, &length, cerr)
		}); err != nil {
			return err
		}
		metrics = C.GoStringN(buffer, C.int(length))
		return nil
	})
	return metrics, err
}

// withHandle runs fn with the manager's handle locked and open.
func (m *Manager) withHandle(fn func() error) error {
	m.ctx.mu.Lock()
	defer m.ctx.mu.Unlock()
	if m.ptr == nil {
		return closedHandle("Manager")
	}
	return fn()
}

// Close waits for the manager's saves in flight, then frees it. Closing twice is harmless.
func (m *Manager) Close() error {
	m.ctx.mu.Lock()
	defer m.ctx.mu.Unlock()
	m.free()
	delete(m.ctx.managers, m)
	runtime.SetFinalizer(m, nil)
	return nil
}

// free releases the C manager; the caller holds ctx.mu.
func (m *Manager) free() {
	if m.ptr != nil {
		C.ckpt_manager_free(m.ptr)
		m.ptr = nil
	}
}
