package ckpt

/*
#include "binding.h"
*/
import "C"

// ContextStats are counters of one rank's work since its Context was created, for monitoring and benchmarks.
type ContextStats struct {
	IOWorkers      int    // I/O worker processes (0: threads of this process)
	ArenaBytes     uint64 // the staging arena's size
	SavesCommitted uint64 // saves whose request succeeded
	PlansComputed  uint64 // saves that exchanged and validated the full state
	PlansReused    uint64 // saves that reused the previous plan (unchanged structure on every rank)
	BytesStaged    uint64 // bytes copied into the arena by saves
	BytesWritten   uint64 // bytes this rank's workers wrote to data files
	BytesRead      uint64 // bytes this rank read from data files during loads
	BytesSent      uint64 // tensor bytes this rank sent to other ranks during loads
	BytesReceived  uint64 // tensor bytes this rank received from other ranks during loads
	Transport      Transport
	ExchangeNs     uint64 // nanoseconds spent moving tensor data between ranks during loads, waits included
}

// Stats returns this rank's counters. Not collective.
func (c *Context) Stats() (ContextStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return ContextStats{}, closedHandle("Context")
	}
	raw := C.ckpt_go_context_stats()
	err := call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_context_stats_get(c.ptr, &raw, cerr) })
	if err != nil {
		return ContextStats{}, err
	}
	return ContextStats{
		IOWorkers:      int(raw.io_workers),
		ArenaBytes:     uint64(raw.arena_bytes),
		SavesCommitted: uint64(raw.saves_committed),
		PlansComputed:  uint64(raw.plans_computed),
		PlansReused:    uint64(raw.plans_reused),
		BytesStaged:    uint64(raw.bytes_staged),
		BytesWritten:   uint64(raw.bytes_written),
		BytesRead:      uint64(raw.bytes_read),
		BytesSent:      uint64(raw.bytes_sent),
		BytesReceived:  uint64(raw.bytes_received),
		Transport:      transportFromC(raw.transport),
		ExchangeNs:     uint64(raw.exchange_ns),
	}, nil
}
