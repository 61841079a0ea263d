package ckpt

/*
#include "binding.h"
*/
import "C"

import (
	"fmt"
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
	// StoreHost and StorePort locate the TCP store that rank 0 hosts. "" and 0: as ckpt_context_options says
	// (MASTER_ADDR; CKPT_STORE_PORT, else MASTER_PORT + 1).
	StoreHost string
	StorePort int
	// Timeout bounds every wait on a peer. 0: CKPT_TIMEOUT_MS, else 5 minutes.
	Timeout time.Duration
	// NodeName groups the ranks that share a host (its disks and NICs). "": CKPT_NODE_NAME, else the host name.
	NodeName string
	// IOWorkers is the number of I/O worker processes of this rank, spawned from the ckpt-io-worker executable
	// beside libckpt. 0: CKPT_IO_WORKERS, else 2. InProcessIO: threads of this process instead, which needs no
	// helper executable.
	IOWorkers int
	// ArenaBytes is the size of the staging arena, the shared memory that every save copies into before it
	// returns; a state larger than the arena is staged in a pipeline. 0: CKPT_ARENA_BYTES, else an eighth of the
	// machine's memory, within 256 MiB and 8 GiB.
	ArenaBytes uint64
	// Transport is how ranks exchange tensor data during loads. A transport named here that cannot load fails
	// NewContext with ErrUnsupported.
	Transport Transport
}

// InProcessIO, as Options.IOWorkers, runs the I/O on threads of this process instead of worker processes.
const InProcessIO = -1

// Transport is how ranks exchange tensor data during loads, so that each stored byte is read once. Its values are
// the C constants plus one, so that the zero value is the default.
type Transport int32

const (
	// TransportDefault takes CKPT_TRANSPORT from the environment (auto, none, ucx, nccl), else TransportAuto.
	TransportDefault Transport = C.CKPT_TRANSPORT_DEFAULT + 1
	// TransportAuto is UCX for host memory and NCCL for CUDA memory where they load, else TransportNone.
	TransportAuto Transport = C.CKPT_TRANSPORT_AUTO + 1
	// TransportNone exchanges nothing: every rank reads what it needs itself.
	TransportNone Transport = C.CKPT_TRANSPORT_NONE + 1
	// TransportUCX uses UCX: shared memory on one host, TCP across hosts.
	TransportUCX Transport = C.CKPT_TRANSPORT_UCX + 1
	// TransportNCCL uses NCCL, for CUDA memory.
	TransportNCCL Transport = C.CKPT_TRANSPORT_NCCL + 1
)

var transportNames = map[Transport]string{TransportDefault: "default", TransportAuto: "auto", TransportNone: "none",
	TransportUCX: "ucx", TransportNCCL: "nccl"}

func (t Transport) String() string {
	if name, ok := transportNames[t]; ok {
		return name
	}
	return fmt.Sprintf("Transport(%d)", int32(t))
}

func (t Transport) toC() (C.int32_t, error) {
	if _, ok := transportNames[t]; !ok {
		return 0, invalidArgument("unknown transport %d", int32(t))
	}
	return C.int32_t(t - 1), nil
}

func transportFromC(transport C.int32_t) Transport { return Transport(transport + 1) }

// Context is one rank's connection to the job: create one per process, Close it at the end.
type Context struct {
	mu        sync.Mutex
	ptr       *C.ckpt_context_t
	rank      int
	worldSize int
	localRank int
	// Requests and managers not yet closed; Close frees them before the context they belong to. mu guards the
	// managers' handles too, since a manager's calls use its context.
	pending  map[*requestHandle]struct{}
	managers map[*Manager]struct{}
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
		managers:  map[*Manager]struct{}{},
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
	if copts.io_workers, err = o.ioWorkersToC(); err != nil {
		return copts, err
	}
	copts.arena_bytes = C.uint64_t(o.ArenaBytes)
	copts.transport, err = o.Transport.toC()
	return copts, err
}

func (o Options) ioWorkersToC() (C.int32_t, error) {
	switch {
	case o.IOWorkers == 0:
		return -1, nil // the library's default
	case o.IOWorkers == InProcessIO:
		return 0, nil
	case o.IOWorkers < 0 || o.IOWorkers > math.MaxInt32:
		return 0, invalidArgument("%d I/O workers is out of range", o.IOWorkers)
	}
	return C.int32_t(o.IOWorkers), nil
}

// Rank is this process's rank.
func (c *Context) Rank() int { return c.rank }

// WorldSize is the number of ranks in the job.
func (c *Context) WorldSize() int { return c.worldSize }

// LocalRank is this rank's index among the ranks of its host.
func (c *Context) LocalRank() int { return c.localRank }

// Close closes the context's open managers, waits for and frees its unclosed save requests, then frees the
// context. Not collective, but every rank should close its context: a rank that goes away early is seen as dead by
// the others.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for manager := range c.managers {
		manager.free()
	}
	c.managers = nil
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
