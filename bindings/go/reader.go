package ckpt

/*
#include "binding.h"
*/
import "C"

import (
	"runtime"
	"sort"
	"sync"
	"unsafe"
)

// Reader inspects a committed checkpoint from any single process; nothing about it is collective.
type Reader struct {
	mu  sync.Mutex
	ptr *C.ckpt_reader_t
}

// CheckpointInfo summarises a checkpoint.
type CheckpointInfo struct {
	FormatMajor   uint32
	FormatMinor   uint32
	WorldSize     uint32 // ranks that saved it
	NodeCount     uint32
	TensorCount   uint64
	ObjectCount   uint64
	CommonCount   uint64
	MetadataCount uint64
	FileCount     uint64
	TotalBytes    uint64 // bytes of tensor and object data
}

// TensorInfo describes one stored tensor.
type TensorInfo struct {
	Key        string
	Dtype      Dtype
	Shape      []uint64
	ChunkCount uint64
}

// ChunkInfo locates one stored box of a tensor.
type ChunkInfo struct {
	Offset     []uint64
	Shape      []uint64
	File       string // relative to the checkpoint directory
	FileOffset uint64
	ByteLength uint64
}

// Open opens the committed checkpoint at path and validates its manifest: ErrNotFound, ErrCorrupt, ErrVersion.
func Open(path string) (*Reader, error) {
	var allocs cAllocs
	defer allocs.free()
	cpath, err := allocs.str("checkpoint path", path)
	if err != nil {
		return nil, err
	}
	var ptr *C.ckpt_reader_t
	if err := call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_reader_open(cpath, &ptr, cerr) }); err != nil {
		return nil, err
	}
	r := &Reader{ptr: ptr}
	runtime.SetFinalizer(r, (*Reader).Close)
	return r, nil
}

// Close frees the reader. Closing twice is harmless.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ptr != nil {
		C.ckpt_reader_free(r.ptr)
		r.ptr = nil
	}
	runtime.SetFinalizer(r, nil)
	return nil
}

// call runs fn on the open reader, serialised with the reader's other calls.
func (r *Reader) call(fn func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ptr == nil {
		return closedHandle("Reader")
	}
	return call(func(cerr *C.ckpt_error_t) C.int32_t { return fn(r.ptr, cerr) })
}

// Info summarises the checkpoint.
func (r *Reader) Info() (CheckpointInfo, error) {
	cinfo := C.ckpt_go_checkpoint_info()
	err := r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_reader_info(ptr, &cinfo, cerr)
	})
	if err != nil {
		return CheckpointInfo{}, err
	}
	return CheckpointInfo{
		FormatMajor:   uint32(cinfo.format_major),
		FormatMinor:   uint32(cinfo.format_minor),
		WorldSize:     uint32(cinfo.world_size),
		NodeCount:     uint32(cinfo.node_count),
		TensorCount:   uint64(cinfo.tensor_count),
		ObjectCount:   uint64(cinfo.object_count),
		CommonCount:   uint64(cinfo.common_count),
		MetadataCount: uint64(cinfo.metadata_count),
		FileCount:     uint64(cinfo.file_count),
		TotalBytes:    uint64(cinfo.total_bytes),
	}, nil
}

// Tensors lists the stored tensors in key order.
func (r *Reader) Tensors() ([]TensorInfo, error) {
	info, err := r.Info()
	if err != nil {
		return nil, err
	}
	tensors := make([]TensorInfo, 0, info.TensorCount)
	for i := uint64(0); i < info.TensorCount; i++ {
		tensor, err := r.tensor(i)
		if err != nil {
			return nil, err
		}
		tensors = append(tensors, tensor)
	}
	return tensors, nil
}

func (r *Reader) tensor(index uint64) (TensorInfo, error) {
	cinfo := C.ckpt_go_tensor_info()
	var tensor TensorInfo
	err := r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
		status := C.ckpt_reader_tensor(ptr, C.uint64_t(index), &cinfo, cerr)
		if status == C.CKPT_OK {
			// The key belongs to the reader: copy it while the reader is locked open.
			tensor = TensorInfo{
				Key:        C.GoString(cinfo.key),
				Dtype:      Dtype(cinfo.dtype),
				Shape:      extents(cinfo.shape, cinfo.ndim),
				ChunkCount: uint64(cinfo.chunk_count),
			}
		}
		return status
	})
	return tensor, err
}

// Chunks lists the stored boxes of tensor key; ErrNotFound if the checkpoint has no such tensor.
func (r *Reader) Chunks(key string) ([]ChunkInfo, error) {
	index, tensor, err := r.findTensor(key)
	if err != nil {
		return nil, err
	}
	chunks := make([]ChunkInfo, 0, tensor.ChunkCount)
	for i := uint64(0); i < tensor.ChunkCount; i++ {
		chunk, err := r.chunk(index, i)
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, chunk)
	}
	return chunks, nil
}

// findTensor finds key by binary search, since libckpt lists tensors in key order.
func (r *Reader) findTensor(key string) (uint64, TensorInfo, error) {
	info, err := r.Info()
	if err != nil {
		return 0, TensorInfo{}, err
	}
	var searchErr error
	found := sort.Search(int(info.TensorCount), func(i int) bool {
		if searchErr != nil {
			return true
		}
		tensor, err := r.tensor(uint64(i))
		searchErr = err
		return err != nil || tensor.Key >= key
	})
	if searchErr != nil {
		return 0, TensorInfo{}, searchErr
	}
	if found < int(info.TensorCount) {
		tensor, err := r.tensor(uint64(found))
		if err != nil || tensor.Key == key {
			return uint64(found), tensor, err
		}
	}
	return 0, TensorInfo{}, &Error{Status: StatusNotFound, Message: "tensor '" + key + "' is not in the checkpoint"}
}

func (r *Reader) chunk(tensorIndex, chunkIndex uint64) (ChunkInfo, error) {
	cinfo := C.ckpt_go_chunk_info()
	var chunk ChunkInfo
	err := r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
		status := C.ckpt_reader_chunk(ptr, C.uint64_t(tensorIndex), C.uint64_t(chunkIndex), &cinfo, cerr)
		if status == C.CKPT_OK {
			chunk = ChunkInfo{
				Offset:     extents(cinfo.offset, cinfo.ndim),
				Shape:      extents(cinfo.shape, cinfo.ndim),
				File:       C.GoString(cinfo.file),
				FileOffset: uint64(cinfo.file_offset),
				ByteLength: uint64(cinfo.byte_length),
			}
		}
		return status
	})
	return chunk, err
}

// ReadBox reads the box (offset, shape) of tensor key into dst, row-major; len(dst) must equal the box's bytes.
// dst may be Go memory or a Buffer's Bytes(). Every block read is checked against its checksum.
func (r *Reader) ReadBox(key string, offset, shape []uint64, dst []byte) error {
	if len(offset) != len(shape) || len(shape) > MaxNdim {
		return invalidArgument("tensor %q: box offset and shape have %d and %d dimensions", key, len(offset),
			len(shape))
	}
	var allocs cAllocs
	defer allocs.free()
	ckey, err := allocs.str("tensor key", key)
	if err != nil {
		return err
	}
	var buffer unsafe.Pointer
	if len(dst) > 0 {
		buffer = unsafe.Pointer(&dst[0])
	}
	return r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_reader_read(ptr, ckey, C.uint32_t(len(shape)), goUint64s(offset), goUint64s(shape), buffer,
			C.uint64_t(len(dst)), cerr)
	})
}

// Common returns a copy of the common bytes stored under key; ErrNotFound if absent.
func (r *Reader) Common(key string) ([]byte, error) {
	var allocs cAllocs
	defer allocs.free()
	ckey, err := allocs.str("common key", key)
	if err != nil {
		return nil, err
	}
	var value []byte
	err = r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
		var data unsafe.Pointer
		var size C.uint64_t
		status := C.ckpt_reader_common(ptr, ckey, &data, &size, cerr)
		if status == C.CKPT_OK {
			value = goBytes(data, size)
		}
		return status
	})
	return value, err
}

// CommonEntries returns copies of every common entry, by key.
func (r *Reader) CommonEntries() (map[string][]byte, error) {
	info, err := r.Info()
	if err != nil {
		return nil, err
	}
	entries := make(map[string][]byte, info.CommonCount)
	for i := uint64(0); i < info.CommonCount; i++ {
		err := r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
			var key *C.char
			var data unsafe.Pointer
			var size C.uint64_t
			status := C.ckpt_reader_common_at(ptr, C.uint64_t(i), &key, &data, &size, cerr)
			if status == C.CKPT_OK {
				entries[C.GoString(key)] = goBytes(data, size)
			}
			return status
		})
		if err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// Metadata returns the user metadata value saved under key; ErrNotFound if absent.
func (r *Reader) Metadata(key string) (string, error) {
	var allocs cAllocs
	defer allocs.free()
	ckey, err := allocs.str("metadata key", key)
	if err != nil {
		return "", err
	}
	var value string
	err = r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
		var cvalue *C.char
		status := C.ckpt_reader_metadata(ptr, ckey, &cvalue, cerr)
		if status == C.CKPT_OK {
			value = C.GoString(cvalue)
		}
		return status
	})
	return value, err
}

// MetadataEntries returns every user metadata entry, in the order saved, as key-value pairs.
func (r *Reader) MetadataEntries() ([][2]string, error) {
	info, err := r.Info()
	if err != nil {
		return nil, err
	}
	entries := make([][2]string, 0, info.MetadataCount)
	for index := uint64(0); index < info.MetadataCount; index++ {
		err = r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
			var key, value *C.char
			status := C.ckpt_reader_metadata_at(ptr, C.uint64_t(index), &key, &value, cerr)
			if status == C.CKPT_OK {
				entries = append(entries, [2]string{C.GoString(key), C.GoString(value)})
			}
			return status
		})
		if err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// Verify reads every chunk of every tensor and object and checks every checksum and file size; ErrCorrupt names
// the first tensor and file that fail.
func (r *Reader) Verify() error {
	return r.call(func(ptr *C.ckpt_reader_t, cerr *C.ckpt_error_t) C.int32_t {
		return C.ckpt_reader_verify(ptr, cerr)
	})
}

// extents copies the first ndim values of a fixed-size C array, clamped to its length.
func extents(values [MaxNdim]C.uint64_t, ndim C.uint32_t) []uint64 {
	n := int(ndim)
	if n > MaxNdim {
		n = MaxNdim
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(values[i])
	}
	return out
}
