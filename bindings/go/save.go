package ckpt

/*
#include "binding.h"
*/
import "C"

import (
	"errors"
	"math"
	"runtime"
	"sort"
	"sync"
	"time"
)

// Tier says where a save puts the checkpoint. The memory tier is the node's ckpt-agent, which the first save to
// memory starts and which outlives the trainers: it keeps the newest complete checkpoint in shared memory, and a
// load of its path (or Manager.LoadLatest) reads that copy. It needs the job's identity, the same on every rank
// and across restarts: CKPT_JOB_ID (or SLURM_JOB_ID, TORCHELASTIC_RUN_ID), else the save fails with
// ErrInvalidArgument. A save past the agent's budget (CKPT_AGENT_BUDGET_BYTES, default half of the node's memory)
// fails with ErrNoSpace; so far the memory tier serves jobs whose ranks share one node (ErrUnsupported otherwise).
type Tier uint64

const (
	// TierStorage saves to the checkpoint directory on storage (the default).
	TierStorage Tier = C.CKPT_TIER_STORAGE
	// TierMemory saves to the agent's memory only: the save succeeds once the checkpoint is complete there, and
	// storage receives it only if the trainers die.
	TierMemory Tier = C.CKPT_TIER_MEMORY
	// TierBoth saves to the agent's memory, then to the checkpoint directory on storage, written by the agent in
	// the background.
	TierBoth Tier = C.CKPT_TIER_BOTH
)

func (t Tier) toC() (C.uint64_t, error) {
	switch t {
	case TierStorage, TierMemory, TierBoth:
		return C.uint64_t(t), nil
	}
	return 0, invalidArgument("unknown tier %d: TierStorage, TierMemory or TierBoth", uint64(t))
}

// SaveOptions configure a save; nil means defaults.
type SaveOptions struct {
	// Metadata is stored in the checkpoint's manifest (Reader.Metadata), taken from rank 0.
	Metadata map[string]string
	// Progress, if set, receives this rank's progress: PhasePlanning, PhaseStaging and PhaseWriting's first report
	// before Save returns, then PhaseWriting, PhaseCommitting and PhaseCommitted or PhaseFailed from a thread of
	// the library, before the request finishes. Once as each phase starts and at most every 100 ms in between. It
	// runs while the Context may be locked: it must not call methods of the Context, its States or Managers (the
	// request's Stats is fine), and should return quickly.
	Progress func(Progress)
	// Tier is where the checkpoint goes (TierStorage by default). Through a Manager, TierMemory and TierBoth
	// override its memory tier policy for this step, and TierStorage follows it.
	Tier Tier
	// InPlace writes this rank's bytes straight from the state's Buffers, with no staging copy: Save then returns
	// only once they are durable, and the Buffers must not change until it returns; the request still finishes
	// with the commit. It suits a save that is waited for anyway: the last one of a job, or a blocking checkpoint.
	InPlace bool
	// CopyOnWrite returns from Save once this rank's host Buffers are write-protected, before any copy
	// (CKPT_SAVE_COPY_ON_WRITE, Linux userfaultfd): the copy runs in the background, and a page written before it
	// was copied is copied first, so the checkpoint holds the values at the call. The Buffers must stay allocated
	// until the request finishes (one unmapped or released meanwhile fails the save, naming its tensor). Refused
	// with InPlace or a memory Tier; where the kernel refuses userfaultfd the save copies at the call.
	CopyOnWrite bool
	// CheckReplicas has the ranks holding replicas of a box compare their copies' block checksums before the save
	// commits (CKPT_SAVE_CHECK_REPLICAS); a difference fails the save (ErrCorrupt, CKPT_E_CORRUPT) naming the
	// tensor, box, blocks and ranks. The same on every rank. The replicas' host Buffers are read after Save
	// returns (write-protected meanwhile, as CopyOnWrite's): they must stay allocated until the request finishes.
	CheckReplicas bool
	// Incremental hashes every tensor box the save writes (SHA-256 per block of 1 MiB, at the call) into the
	// manifest, so that a later save can name this one as its Base (CKPT_SAVE_INCREMENTAL); with a Base, only the
	// rows that changed since it are written. Storage Tier only (ErrInvalidArgument); with CheckReplicas the
	// replicas are compared with the writer's whole copy, written or not.
	Incremental bool
	// Compress stores everything the save writes losslessly compressed (CKPT_SAVE_COMPRESS): each block of 1 MiB
	// on its own, in the I/O workers, so that ranged and resharded loads decode only the blocks they read;
	// floating-point tensors with their bytes grouped by significance, then zstd (BF16 weights shrink by about
	// 1.5x). Worth it on storage slower than about a GiB/s per I/O worker. The checkpoint is format 3
	// (CheckpointInfo.FormatMajor). Refused (ErrInvalidArgument) with InPlace, a memory Tier or on object storage.
	// One tensor alone: TensorShard.Compress.
	Compress bool
	// Base, with Incremental only (ErrInvalidArgument without it): the path of a committed checkpoint beside the
	// save's, saved with Incremental, whose bytes the save refers to instead of writing the rows whose blocks all
	// hash as its blocks do. The new checkpoint needs it: a load after it was deleted fails with ErrCorrupt naming
	// it; ErrNotFound when it holds no checkpoint. Empty: a save to a path writes everything, and a Manager's save
	// takes the latest committed step.
	Base string
	// Metrics, through a Manager only: the text of a JSON object (at most 1 MiB) stored with the step, which
	// commits with it (Manager.Metrics reads it back); empty: none. Rank 0's is stored.
	Metrics string
	// BestValue, through a Manager only: the step's score (finite), which ManagerOptions.KeepBest ranks it by;
	// nil: none. Rank 0's is stored.
	BestValue *float64
}

// SaveRequest tracks a save. Its State's buffers may be modified as soon as Save returns; Wait tells when the
// checkpoint is committed. Close it when done: Close waits for an unfinished save.
type SaveRequest struct {
	ctx    *Context // keeps the context alive while the request is
	handle *requestHandle
}

// requestHandle is the C request, shared with the Context so that Context.Close can free it first.
type requestHandle struct {
	mu sync.Mutex // one Test, Wait or free at a time
	// Stats hold statsMu shared, so that they run beside a Wait; free holds it exclusively. ptr changes under both.
	statsMu  sync.RWMutex
	ptr      *C.ckpt_request_t
	progress *progressHandle // the save's callback, called until the request finishes
	final    RequestStats    // the last figures, kept once freed
}

func (h *requestHandle) free() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr == nil {
		return
	}
	// Waited for before statsMu is taken: the progress callback may call Stats until the save finishes.
	C.ckpt_request_wait(h.ptr, 0, nil)
	h.statsMu.Lock()
	defer h.statsMu.Unlock()
	h.final, _ = h.stats()
	C.ckpt_request_free(h.ptr)
	h.ptr = nil
	h.progress.delete()
	h.progress = nil
}

// stats reads the live request's figures; statsMu held.
func (h *requestHandle) stats() (RequestStats, error) {
	raw := C.ckpt_go_request_stats()
	err := call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_request_stats_get(h.ptr, &raw, cerr) })
	if err != nil {
		return RequestStats{}, err
	}
	return requestStatsFromC(&raw), nil
}

// Save saves state as the checkpoint directory path, on storage every rank can reach. Collective. Before any
// byte is written, the ranks agree that every tensor's shards tile its global shape exactly (ErrMismatch names
// the key and ranks otherwise); replicated boxes are written once. ErrAlreadyExists if path is already a
// checkpoint.
//
// Save returns as soon as this rank's bytes are copied into the staging arena (with SaveOptions.InPlace: written
// from the Buffers and durable): the state's Buffers may then be modified, while worker processes write them and
// the checkpoint is committed in the background. path appears only when the checkpoint is complete and durable; the
// request's Wait or Test reports the outcome, the same on every rank.
func (c *Context) Save(state *State, path string, opts *SaveOptions) (*SaveRequest, error) {
	var allocs cAllocs
	defer allocs.free()
	cpath, err := allocs.str("checkpoint path", path)
	if err != nil {
		return nil, err
	}
	return c.startSave(state, opts, func(copts *C.ckpt_save_options, request **C.ckpt_request_t) error {
		return call(func(cerr *C.ckpt_error_t) C.int32_t {
			return C.ckpt_save(c.ptr, state.ptr, cpath, copts, request, cerr)
		})
	})
}

// startSave runs `start`, a C call that starts a save, with the context and state locked and open, and tracks the
// request it returns.
func (c *Context) startSave(state *State, opts *SaveOptions,
	start func(copts *C.ckpt_save_options, request **C.ckpt_request_t) error) (*SaveRequest, error) {
	var allocs cAllocs
	defer allocs.free()
	copts, err := opts.toC(&allocs)
	if err != nil {
		return nil, err
	}
	var progress *progressHandle
	if opts != nil {
		progress = newProgressHandle(opts.Progress)
	}
	if progress != nil {
		copts.progress, copts.progress_user = progress.cParts()
	}
	var request *SaveRequest
	err = c.withState(state, func() error {
		var ptr *C.ckpt_request_t
		if err := start(&copts, &ptr); err != nil {
			return err
		}
		request = &SaveRequest{ctx: c, handle: &requestHandle{ptr: ptr, progress: progress}}
		c.pending[request.handle] = struct{}{}
		return nil
	})
	if err != nil {
		progress.delete() // the failed call made its last report before returning
		return nil, err
	}
	runtime.SetFinalizer(request, (*SaveRequest).Close)
	return request, nil
}

// withState runs fn with the context and state locked, after checking that neither is closed.
func (c *Context) withState(state *State, fn func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return closedHandle("Context")
	}
	state.mu.Lock()
	defer state.mu.Unlock()
	if state.ptr == nil {
		return closedHandle("State")
	}
	return fn()
}

func (o *SaveOptions) toC(allocs *cAllocs) (C.ckpt_save_options, error) {
	copts := C.ckpt_go_save_options()
	if o == nil {
		return copts, nil
	}
	if o.InPlace {
		copts.flags |= C.CKPT_SAVE_IN_PLACE
	}
	if o.CopyOnWrite {
		copts.flags |= C.CKPT_SAVE_COPY_ON_WRITE
	}
	if o.CheckReplicas {
		copts.flags |= C.CKPT_SAVE_CHECK_REPLICAS
	}
	if o.Incremental {
		copts.flags |= C.CKPT_SAVE_INCREMENTAL
	}
	if o.Compress {
		copts.flags |= C.CKPT_SAVE_COMPRESS
	}
	var err error
	if o.Base != "" {
		if copts.base, err = allocs.str("base checkpoint path", o.Base); err != nil {
			return copts, err
		}
	}
	if o.Metrics != "" {
		if copts.metrics, err = allocs.str("metrics", o.Metrics); err != nil {
			return copts, err
		}
	}
	if o.BestValue != nil {
		copts.best_value, copts.has_best_value = C.double(*o.BestValue), 1
	}
	if copts.tier, err = o.Tier.toC(); err != nil || len(o.Metadata) == 0 {
		return copts, err
	}
	if len(o.Metadata) > math.MaxUint32 {
		return copts, invalidArgument("%d metadata entries are too many", len(o.Metadata))
	}
	keys := make([]string, 0, len(o.Metadata))
	for key := range o.Metadata {
		keys = append(keys, key)
	}
	sort.Strings(keys) // the manifest should not depend on map iteration order
	values := make([]string, len(keys))
	for i, key := range keys {
		values[i] = o.Metadata[key]
	}
	if copts.metadata_keys, err = allocs.strs("metadata key", keys); err != nil {
		return copts, err
	}
	if copts.metadata_values, err = allocs.strs("metadata value", values); err != nil {
		return copts, err
	}
	copts.metadata_count = C.uint32_t(len(keys))
	return copts, nil
}

// Test reports without blocking whether the save has finished, and its error if it failed (the same on every
// rank).
func (r *SaveRequest) Test() (done bool, err error) {
	err = r.call(func(ptr *C.ckpt_request_t, cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_request_test(ptr, cerr)
	})
	if errors.Is(err, ErrInProgress) {
		return false, nil
	}
	return true, err
}

// Wait blocks until the save has finished or timeout has passed (0: the context's timeout) and returns the save's
// error; a request still running when the timeout passes yields an error matching ErrInProgress.
func (r *SaveRequest) Wait(timeout time.Duration) error {
	timeoutMs := (timeout + time.Millisecond - 1) / time.Millisecond
	if timeout < 0 || timeoutMs > math.MaxUint32 {
		return invalidArgument("wait timeout %v is out of range", timeout)
	}
	return r.call(func(ptr *C.ckpt_request_t, cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_request_wait(ptr, C.uint32_t(timeoutMs), cerr)
	})
}

func (r *SaveRequest) call(fn func(ptr *C.ckpt_request_t, cerr *C.ckpt_error_t) C.int32_t) error {
	r.handle.mu.Lock()
	defer r.handle.mu.Unlock()
	if r.handle.ptr == nil {
		return closedHandle("SaveRequest")
	}
	return call(func(cerr *C.ckpt_error_t) C.int32_t { return fn(r.handle.ptr, cerr) })
}

// Stats returns what the save has done on this rank: a snapshot while it runs, final once it finished (also after
// Close). Never blocks on the save, and may run while another goroutine waits for it.
func (r *SaveRequest) Stats() (RequestStats, error) {
	r.handle.statsMu.RLock()
	defer r.handle.statsMu.RUnlock()
	if r.handle.ptr == nil {
		return r.handle.final, nil
	}
	return r.handle.stats()
}

// Close frees the request, waiting first for an unfinished save. Closing twice is harmless.
func (r *SaveRequest) Close() error {
	r.ctx.mu.Lock()
	defer r.ctx.mu.Unlock()
	r.handle.free()
	delete(r.ctx.pending, r.handle)
	runtime.SetFinalizer(r, nil)
	return nil
}

// Strictness says what a load does about keys that the state and the checkpoint do not share.
type Strictness int32

const (
	// StrictDefault keeps libckpt's default: StrictFail for missing keys, StrictLog for unexpected keys.
	StrictDefault Strictness = iota
	// StrictFail fails the load with ErrMismatch.
	StrictFail
	// StrictLog logs a warning naming the keys and goes on.
	StrictLog
	// StrictIgnore goes on silently.
	StrictIgnore
)

// LoadOptions configure a load; nil or the zero value means libckpt's defaults.
type LoadOptions struct {
	// MissingKeys: a key this rank asks for that the checkpoint lacks.
	MissingKeys Strictness
	// UnexpectedKeys: a tensor or object key the checkpoint has that no rank asks for.
	UnexpectedKeys Strictness
	// Progress, if set, receives this rank's progress on the loading goroutine's thread before the load returns:
	// PhasePlanning, PhaseReading (bytes of its tensor buffers filled), then PhaseLoaded or PhaseFailed. It must
	// not call methods of the Context or the State, which are locked.
	Progress func(Progress)
}

// toC gives the C options and the progress handle they name, to delete once the call returned.
func (o *LoadOptions) toC() (C.ckpt_load_options, *progressHandle, error) {
	copts := C.ckpt_go_load_options()
	if o == nil {
		return copts, nil, nil
	}
	var err error
	if copts.missing_keys, err = o.MissingKeys.toC(copts.missing_keys); err != nil {
		return copts, nil, err
	}
	if copts.unexpected_keys, err = o.UnexpectedKeys.toC(copts.unexpected_keys); err != nil {
		return copts, nil, err
	}
	progress := newProgressHandle(o.Progress)
	if progress != nil {
		copts.progress, copts.progress_user = progress.cParts()
	}
	return copts, progress, nil
}

func (s Strictness) toC(libraryDefault C.int32_t) (C.int32_t, error) {
	switch s {
	case StrictDefault:
		return libraryDefault, nil
	case StrictFail:
		return C.CKPT_STRICT_FAIL, nil
	case StrictLog:
		return C.CKPT_STRICT_LOG, nil
	case StrictIgnore:
		return C.CKPT_STRICT_IGNORE, nil
	}
	return 0, invalidArgument("unknown strictness %d", int32(s))
}

// Load fills every Buffer registered in state from the checkpoint at path, whatever layout and number of ranks
// saved it, and makes its common entries available through State.Common. Collective. Every block read is checked
// against its checksum; a failure on any rank fails the load on every rank, and buffers may then be partly filled.
func (c *Context) Load(state *State, path string, opts *LoadOptions) error {
	copts, progress, err := opts.toC()
	if err != nil {
		return err
	}
	defer progress.delete()
	var allocs cAllocs
	defer allocs.free()
	cpath, err := allocs.str("checkpoint path", path)
	if err != nil {
		return err
	}
	return c.withState(state, func() error {
		return call(func(cerr *C.ckpt_error_t) C.int32_t {
			return C.ckpt_load(c.ptr, state.ptr, cpath, &copts, cerr)
		})
	})
}
