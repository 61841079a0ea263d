package ckpt

/*
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// Buffer is zero-initialised memory allocated by C, for the data of tensor and object shards. libckpt reads and
// fills it during Save and Load, after the call that registered it has returned, which Go memory cannot allow.
//
// A Buffer registered in a State must stay valid until that State is closed: the State holds a reference, so
// Close on the Buffer frees the memory only when no open State refers to it. The views (Bytes, Float32s, ...)
// alias the memory and must not be used once it is freed.
type Buffer struct {
	mu      sync.Mutex
	data    unsafe.Pointer
	size    int
	holders int // open States that registered this buffer
	closed  bool
}

// NewBuffer allocates size zeroed bytes.
func NewBuffer(size int) (*Buffer, error) {
	if size < 0 {
		return nil, invalidArgument("buffer size %d is negative", size)
	}
	allocation := size
	if allocation == 0 {
		allocation = 1 // calloc(0) may return NULL; an empty shard still needs a valid pointer
	}
	data := C.calloc(C.size_t(allocation), 1)
	if data == nil {
		return nil, &Error{Status: StatusNoMemory, Message: fmt.Sprintf("cannot allocate a buffer of %d bytes", size)}
	}
	return &Buffer{data: data, size: size}, nil
}

// NewBufferFor allocates zeroed room for `elements` elements of dtype.
func NewBufferFor(dtype Dtype, elements int) (*Buffer, error) {
	elementSize := dtype.Size()
	if elementSize == 0 {
		return nil, invalidArgument("unknown dtype %d", int32(dtype))
	}
	if elements < 0 || elements > math.MaxInt/elementSize {
		return nil, invalidArgument("%d elements of %s do not fit in a buffer", elements, dtype)
	}
	return NewBuffer(elements * elementSize)
}

// Size is the buffer's length in bytes.
func (b *Buffer) Size() int {
	return b.size
}

// Close frees the memory, or marks it to be freed when the last State that registered it is closed. Views must
// not be used afterwards. Closing twice is harmless.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.freeIfUnused()
	return nil
}

func (b *Buffer) freeIfUnused() {
	if b.closed && b.holders == 0 && b.data != nil {
		C.free(b.data)
		b.data = nil
	}
}

// retain registers one more State holding the buffer and returns its memory for libckpt.
func (b *Buffer) retain() (unsafe.Pointer, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, 0, closedHandle("Buffer")
	}
	b.holders++
	return b.data, b.size, nil
}

// release drops a State's hold, freeing the memory if the buffer was closed meanwhile.
func (b *Buffer) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holders--
	b.freeIfUnused()
}

// view is the buffer's memory as a slice of T, nil once the buffer is closed. A size that is not a multiple of
// T's size leaves the trailing bytes out.
func view[T any](b *Buffer) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	var element T
	return unsafe.Slice((*T)(b.data), b.size/int(unsafe.Sizeof(element)))
}

// Bytes views the buffer as raw bytes (any dtype, including BOOL, F16, BF16 and F8).
func (b *Buffer) Bytes() []byte { return view[byte](b) }

// Int8s views the buffer as I8 elements.
func (b *Buffer) Int8s() []int8 { return view[int8](b) }

// Int16s views the buffer as I16 elements.
func (b *Buffer) Int16s() []int16 { return view[int16](b) }

// Uint16s views the buffer as U16 elements, or as the raw bits of F16 and BF16 elements.
func (b *Buffer) Uint16s() []uint16 { return view[uint16](b) }

// Int32s views the buffer as I32 elements.
func (b *Buffer) Int32s() []int32 { return view[int32](b) }

// Uint32s views the buffer as U32 elements.
func (b *Buffer) Uint32s() []uint32 { return view[uint32](b) }

// Int64s views the buffer as I64 elements.
func (b *Buffer) Int64s() []int64 { return view[int64](b) }

// Uint64s views the buffer as U64 elements.
func (b *Buffer) Uint64s() []uint64 { return view[uint64](b) }

// Float32s views the buffer as F32 elements.
func (b *Buffer) Float32s() []float32 { return view[float32](b) }

// Float64s views the buffer as F64 elements.
func (b *Buffer) Float64s() []float64 { return view[float64](b) }

// Complex64s views the buffer as C64 elements.
func (b *Buffer) Complex64s() []complex64 { return view[complex64](b) }
