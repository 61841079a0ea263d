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
	// Bytes of ckpt's collective metadata (plans, agreements, addresses) this rank sent and received, and the
	// collectives that went through the TCP store (0 on one rank, or when the job's own collectives carry them).
	ControlBytesSent     uint64
	ControlBytesReceived uint64
	StoreCollectives     uint64
	// How the last load read its tensors (LoadReadsOnce: read once + exchange, LoadReadsOwn: each rank its own
	// pieces; 0 before any load), and its read amplification x 1000 (bytes read by all ranks over the stored bytes
	// of the tensors asked for).
	LastLoadReads                  uint64
	LastLoadReadAmplificationMilli uint64
}

// ContextStats.LastLoadReads values.
const (
	LoadReadsOnce = uint64(C.CKPT_LOAD_READS_ONCE)
	LoadReadsOwn  = uint64(C.CKPT_LOAD_READS_OWN)
)

// RequestStats are what a save has done on this rank (SaveRequest.Stats). The phases follow one another: planning
// and staging (together BlockingNs, what Save cost the caller), writing, committing; TotalNs spans them all. A phase
// still running counts until now, one not reached counts 0.
type RequestStats struct {
	Committed      bool   // the save committed (on every rank)
	StateBytes     uint64 // tensor and object bytes this rank registered, replicas included
	BytesToWrite   uint64 // this rank's share of the unique bytes
	BytesStaged    uint64
	BytesWritten   uint64 // written by the I/O workers so far; all durable once writing ends
	BytesCommitted uint64 // BytesWritten once committed, else 0
	FilesWritten   uint64 // data files finished: written, synced and closed
	PlanningNs     uint64
	StagingNs      uint64
	BlockingNs     uint64
	WritingNs      uint64 // from Save's return until this rank's data is durable
	CommittingNs   uint64 // from then until the request finished: every rank's reports, the manifest, the rename
	TotalNs        uint64
}

// GBps is this rank's save throughput: bytes written per nanosecond of the whole save, i.e. GB/s.
func (s RequestStats) GBps() float64 {
	if s.TotalNs == 0 {
		return 0
	}
	return float64(s.BytesWritten) / float64(s.TotalNs)
}

func requestStatsFromC(raw *C.ckpt_request_stats) RequestStats {
	return RequestStats{
		Committed:      raw.committed != 0,
		StateBytes:     uint64(raw.state_bytes),
		BytesToWrite:   uint64(raw.bytes_to_write),
		BytesStaged:    uint64(raw.bytes_staged),
		BytesWritten:   uint64(raw.bytes_written),
		BytesCommitted: uint64(raw.bytes_committed),
		FilesWritten:   uint64(raw.files_written),
		PlanningNs:     uint64(raw.planning_ns),
		StagingNs:      uint64(raw.staging_ns),
		BlockingNs:     uint64(raw.blocking_ns),
		WritingNs:      uint64(raw.writing_ns),
		CommittingNs:   uint64(raw.committing_ns),
		TotalNs:        uint64(raw.total_ns),
	}
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
		IOWorkers:                      int(raw.io_workers),
		ArenaBytes:                     uint64(raw.arena_bytes),
		SavesCommitted:                 uint64(raw.saves_committed),
		PlansComputed:                  uint64(raw.plans_computed),
		PlansReused:                    uint64(raw.plans_reused),
		BytesStaged:                    uint64(raw.bytes_staged),
		BytesWritten:                   uint64(raw.bytes_written),
		BytesRead:                      uint64(raw.bytes_read),
		BytesSent:                      uint64(raw.bytes_sent),
		BytesReceived:                  uint64(raw.bytes_received),
		Transport:                      transportFromC(raw.transport),
		ExchangeNs:                     uint64(raw.exchange_ns),
		ControlBytesSent:               uint64(raw.control_bytes_sent),
		ControlBytesReceived:           uint64(raw.control_bytes_received),
		StoreCollectives:               uint64(raw.store_collectives),
		LastLoadReads:                  uint64(raw.last_load_reads),
		LastLoadReadAmplificationMilli: uint64(raw.last_load_read_amplification_milli),
	}, nil
}
