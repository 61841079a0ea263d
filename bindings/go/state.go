package ckpt

/*
#include "binding.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// TensorShard describes the box of a global tensor that this rank holds (for a save) or wants (for a load).
type TensorShard struct {
	Key         string
	Dtype       Dtype
	GlobalShape []uint64 // extents of the whole tensor; empty for a scalar
	// LocalShape and GlobalOffset locate the box; nil means the whole tensor and the origin.
	LocalShape   []uint64
	GlobalOffset []uint64
	// ReplicaID tells apart the ranks holding the same box (data parallelism); nil or all zeros marks the main
	// replica. Replicas are written once.
	ReplicaID []uint32
	// Flat, when set, says that Data holds only the row-major element range [Start, End) of the box, as a
	// distributed optimizer does.
	Flat *FlatRange
	// AllowShapeMismatch, for a load, accepts a checkpoint whose global shape differs: missing elements are
	// zeroed, extra ones dropped.
	AllowShapeMismatch bool
	// Compress, for a save, stores this tensor's bytes compressed, as SaveOptions.Compress stores every tensor's
	// (CKPT_SHARD_COMPRESS), in any staged save to a file system; a save in place, to a memory Tier or to object
	// storage stores them as they are. The rank that writes a box decides by its own shard's flag.
	Compress bool
	// Data holds the box's elements in row-major order (or those of Flat); its size must match exactly.
	Data *Buffer
}

// FlatRange is a range [Start, End) of elements of a box in row-major order.
type FlatRange struct {
	Start, End uint64
}

// State is what one rank registers for a save or a load. Close it when done; it keeps the Buffers registered in
// it alive until then.
type State struct {
	mu      sync.Mutex
	ptr     *C.ckpt_state_t
	buffers []*Buffer
}

// NewState creates an empty state.
func NewState() (*State, error) {
	var ptr *C.ckpt_state_t
	if err := call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_state_create(&ptr, cerr) }); err != nil {
		return nil, err
	}
	s := &State{ptr: ptr}
	runtime.SetFinalizer(s, (*State).Close)
	return s, nil
}

// Close frees the state and releases its Buffers. Closing twice is harmless.
func (s *State) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr != nil {
		C.ckpt_state_free(s.ptr)
		s.ptr = nil
	}
	for _, b := range s.buffers {
		b.release()
	}
	s.buffers = nil
	runtime.SetFinalizer(s, nil)
	return nil
}

// AddTensor registers one shard. The shapes are copied; shard.Data is referenced until the state is closed.
// libckpt checks the shard (dtype, bounds, data size, flattened range) and names the key when it refuses it.
func (s *State) AddTensor(shard TensorShard) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == nil {
		return closedHandle("State")
	}
	if shard.Data == nil {
		return invalidArgument("tensor %q has no data buffer", shard.Key)
	}
	var allocs cAllocs
	defer allocs.free()
	cshard, err := shard.toC(&allocs)
	if err != nil {
		return err
	}
	data, size, err := shard.Data.retain()
	if err != nil {
		return invalidArgument("tensor %q: %v", shard.Key, err)
	}
	cshard.data = data
	cshard.data_size = C.uint64_t(size)
	err = call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_state_add_tensor(s.ptr, &cshard, cerr) })
	s.keepOrRelease(shard.Data, err)
	return err
}

func (t *TensorShard) toC(allocs *cAllocs) (C.ckpt_tensor_shard, error) {
	cshard := C.ckpt_go_tensor_shard()
	ndim := len(t.GlobalShape)
	if ndim > MaxNdim {
		return cshard, invalidArgument("tensor %q has %d dimensions, more than %d", t.Key, ndim, MaxNdim)
	}
	localShape, globalOffset := t.LocalShape, t.GlobalOffset
	if localShape == nil {
		localShape = t.GlobalShape
	}
	if globalOffset == nil {
		globalOffset = make([]uint64, ndim)
	}
	if len(localShape) != ndim || len(globalOffset) != ndim {
		return cshard, invalidArgument("tensor %q: global shape, local shape and global offset differ in length "+
			"(%d, %d, %d)", t.Key, ndim, len(localShape), len(globalOffset))
	}
	key, err := allocs.str("tensor key", t.Key)
	if err != nil {
		return cshard, err
	}
	cshard.key = key
	cshard.dtype = C.int32_t(t.Dtype)
	cshard.ndim = C.uint32_t(ndim)
	cshard.global_shape = allocs.uint64s(t.GlobalShape)
	cshard.local_shape = allocs.uint64s(localShape)
	cshard.global_offset = allocs.uint64s(globalOffset)
	cshard.replica_ndim = C.uint32_t(len(t.ReplicaID))
	cshard.replica_id = allocs.uint32s(t.ReplicaID)
	if t.Flat != nil {
		cshard.flags |= C.CKPT_SHARD_FLATTENED
		cshard.flat_start = C.uint64_t(t.Flat.Start)
		cshard.flat_end = C.uint64_t(t.Flat.End)
	}
	if t.AllowShapeMismatch {
		cshard.flags |= C.CKPT_SHARD_ALLOW_SHAPE_MISMATCH
	}
	if t.Compress {
		cshard.flags |= C.CKPT_SHARD_COMPRESS
	}
	return cshard, nil
}

// AddObject registers the opaque bytes of one cell (gridIndex) of an object sharded over a grid (gridShape);
// objects are not reshardable: a load asks for the same grid. For a save, data holds the bytes. For a load, data
// either has exactly the saved size or is nil, in which case the bytes stay in the state for Object.
func (s *State) AddObject(key string, gridShape, gridIndex []uint64, data *Buffer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == nil {
		return closedHandle("State")
	}
	if len(gridShape) != len(gridIndex) || len(gridShape) > MaxNdim {
		return invalidArgument("object %q: grid shape and index have %d and %d dimensions", key, len(gridShape),
			len(gridIndex))
	}
	var allocs cAllocs
	defer allocs.free()
	ckey, err := allocs.str("object key", key)
	if err != nil {
		return err
	}
	var ptr unsafe.Pointer
	var size int
	if data != nil {
		if ptr, size, err = data.retain(); err != nil {
			return invalidArgument("object %q: %v", key, err)
		}
	}
	err = call(func(cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_state_add_object(s.ptr, ckey, C.uint32_t(len(gridShape)), goUint64s(gridShape),
			goUint64s(gridIndex), ptr, C.uint64_t(size), cerr)
	})
	if data != nil {
		s.keepOrRelease(data, err)
	}
	return err
}

// keepOrRelease keeps a retained buffer referenced by the state if its registration succeeded.
func (s *State) keepOrRelease(b *Buffer, err error) {
	if err != nil {
		b.release()
		return
	}
	s.buffers = append(s.buffers, b)
}

// AddCommon registers replicated bytes (config, step, RNG state), copied now. A save stores them once, from rank
// 0; a load gives every rank all the common entries of the checkpoint.
func (s *State) AddCommon(key string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == nil {
		return closedHandle("State")
	}
	var allocs cAllocs
	defer allocs.free()
	ckey, err := allocs.str("common key", key)
	if err != nil {
		return err
	}
	var ptr unsafe.Pointer
	if len(data) > 0 {
		ptr = unsafe.Pointer(&data[0])
	}
	return call(func(cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_state_add_common(s.ptr, ckey, ptr, C.uint64_t(len(data)), cerr)
	})
}

// Common returns a copy of the common bytes stored under key, after a load. ErrNotFound if absent.
func (s *State) Common(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == nil {
		return nil, closedHandle("State")
	}
	var allocs cAllocs
	defer allocs.free()
	ckey, err := allocs.str("common key", key)
	if err != nil {
		return nil, err
	}
	var data unsafe.Pointer
	var size C.uint64_t
	err = call(func(cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_state_common(s.ptr, ckey, &data, &size, cerr)
	})
	if err != nil {
		return nil, err
	}
	return goBytes(data, size), nil
}

// Object returns a copy of the loaded bytes of an object cell registered with a nil Buffer.
func (s *State) Object(key string, gridIndex []uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == nil {
		return nil, closedHandle("State")
	}
	var allocs cAllocs
	defer allocs.free()
	ckey, err := allocs.str("object key", key)
	if err != nil {
		return nil, err
	}
	var data unsafe.Pointer
	var size C.uint64_t
	err = call(func(cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_state_object(s.ptr, ckey, goUint64s(gridIndex), &data, &size, cerr)
	})
	if err != nil {
		return nil, err
	}
	return goBytes(data, size), nil
}

// goBytes copies size bytes of C memory into a new Go slice (empty, not nil, for size 0).
func goBytes(data unsafe.Pointer, size C.uint64_t) []byte {
	out := make([]byte, int(size))
	if size > 0 {
		copy(out, unsafe.Slice((*byte)(data), int(size)))
	}
	return out
}
