package ckpt

/*
#include "binding.h"
*/
import "C"

import (
	"math"
	"runtime"
	"sync"
	"time"
)

// Options configure a Context. The zero value takes everything from the launcher's environment.
type Options struct {
	// Rank and WorldSize of this process. WorldSize 0 takes rank, world size and local rank from the launcher's
	// environment: torchrun (RANK, WORLD_SIZE, LOCAL_RANK), OpenMPI or SLURM; with none set, a single-rank job.
	Rank      int
	WorldSize int
	// LocalRank is this rank's index among the ranks of its host, used only with a non-zero WorldSize; negative
	// takes it from the environment.
	LocalRank int
	// StoreHost and StorePort locate the TCP store that rank 0 hosts. "" and 0: MASTER_ADDR and MASTER_PORT,
	// else 127.0.0.1:29500.
	StoreHost string
	StorePort int
	// Timeout bounds every wait on a peer. 0: CKPT_TIMEOUT_MS, else 5 minutes.
	Timeout time.Duration
	// NodeName groups the ranks that share a host (its disks and NICs). "": CKPT_NODE_NAME, else the host name.
	NodeName string
}

// Context is one rank's connection to the job: create one per process, Close it at the end.
type Context struct {
	mu        sync.Mutex
	ptr       *C.ckpt_context_t
	rank      int
	worldSize int
	localRank int
	// Requests not yet closed; Close frees them before the context they belong to.
	pending map[*requestHandle]struct{}
}

// NewContext creates this rank's context and connects it to the other ranks. Collective: rank 0 hosts the store
// and waits up to the timeout for every other rank.
func NewContext(opts Options) (*Context, error) {
	var allocs cAllocs
	defer allocs.free()
	copts, err := opts.toC(&allocs)
	if err != nil {
		return nil, err
	}
	var ptr *C.ckpt_context_t
	if err := call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_context_create(&copts, &ptr, cerr) }); err != nil {
		return nil, err
	}
	c := &Context{
		ptr:       ptr,
		rank:      int(C.ckpt_context_rank(ptr)),
		worldSize: int(C.ckpt_context_world_size(ptr)),
		localRank: int(C.ckpt_context_local_rank(ptr)),
		pending:   map[*requestHandle]struct{}{},
	}
	runtime.SetFinalizer(c, (*Context).Close)
	return c, nil
}

// NewContextFromEnv creates a context from the launcher's environment alone, as NewContext(Options{}) does.
func NewContextFromEnv() (*Context, error) {
	return NewContext(Options{})
}

func (o Options) toC(allocs *cAllocs) (C.ckpt_context_options, error) {
	copts := C.ckpt_go_context_options()
	switch {
	case o.WorldSize < 0 || o.Rank < 0 || o.WorldSize > math.MaxInt32:
		return copts, invalidArgument("rank %d of world size %d is out of range", o.Rank, o.WorldSize)
	case o.WorldSize == 0 && o.Rank != 0:
		return copts, invalidArgument("rank %d is set but world size is 0 (taken from the environment)", o.Rank)
	case o.WorldSize > 0:
		if o.Rank >= o.WorldSize {
			return copts, invalidArgument("rank %d does not fit world size %d", o.Rank, o.WorldSize)
		}
		copts.rank = C.int32_t(o.Rank)
		copts.world_size = C.int32_t(o.WorldSize)
		if o.LocalRank >= 0 {
			copts.local_rank = C.int32_t(o.LocalRank)
		}
	}
	if o.StorePort < 0 || o.StorePort > math.MaxUint16 {
		return copts, invalidArgument("store port %d is out of range", o.StorePort)
	}
	if o.StorePort != 0 {
		copts.store_port = C.int32_t(o.StorePort)
	}
	timeoutMs := (o.Timeout + time.Millisecond - 1) / time.Millisecond
	if o.Timeout < 0 || timeoutMs > math.MaxUint32 {
		return copts, invalidArgument("timeout %v is out of range", o.Timeout)
	}
	copts.timeout_ms = C.uint32_t(timeoutMs)
	var err error
	if o.StoreHost != "" {
		if copts.store_host, err = allocs.str("store host", o.StoreHost); err != nil {
			return copts, err
		}
	}
	if o.NodeName != "" {
		if copts.node_name, err = allocs.str("node name", o.NodeName); err != nil {
			return copts, err
		}
	}
	return copts, nil
}

// Rank is this process's rank.
func (c *Context) Rank() int { return c.rank }

// WorldSize is the number of ranks in the job.
func (c *Context) WorldSize() int { return c.worldSize }

// LocalRank is this rank's index among the ranks of its host.
func (c *Context) LocalRank() int { return c.localRank }

// Close waits for and frees the context's unclosed save requests, then frees the context. Not collective, but
// every rank should close its context: a rank that goes away early is seen as dead by the others.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for handle := range c.pending {
		handle.free()
	}
	c.pending = nil
	if c.ptr != nil {
		C.ckpt_context_free(c.ptr)
		c.ptr = nil
	}
	runtime.SetFinalizer(c, nil)
	return nil
}
