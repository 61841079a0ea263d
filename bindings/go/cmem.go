package ckpt

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"strings"
	"unsafe"
)

// cAllocs collects the C copies of a call's strings and arrays. Arguments that libckpt reads through pointers
// stored inside a struct must be C memory: cgo forbids passing Go memory that holds Go pointers.
type cAllocs []unsafe.Pointer

func (a *cAllocs) free() {
	for _, p := range *a {
		C.free(p)
	}
	*a = nil
}

// str copies s as a NUL-terminated C string; `what` names the argument when s holds a NUL byte, which C would
// silently truncate.
func (a *cAllocs) str(what, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, invalidArgument("%s %q contains a NUL byte", what, s)
	}
	cs := C.CString(s)
	*a = append(*a, unsafe.Pointer(cs))
	return cs, nil
}

// uint64s copies v; nil for an empty v.
func (a *cAllocs) uint64s(v []uint64) *C.uint64_t {
	if len(v) == 0 {
		return nil
	}
	p := C.malloc(C.size_t(len(v)) * C.size_t(unsafe.Sizeof(C.uint64_t(0))))
	*a = append(*a, p)
	copy(unsafe.Slice((*uint64)(p), len(v)), v)
	return (*C.uint64_t)(p)
}

// uint32s copies v; nil for an empty v.
func (a *cAllocs) uint32s(v []uint32) *C.uint32_t {
	if len(v) == 0 {
		return nil
	}
	p := C.malloc(C.size_t(len(v)) * C.size_t(unsafe.Sizeof(C.uint32_t(0))))
	*a = append(*a, p)
	copy(unsafe.Slice((*uint32)(p), len(v)), v)
	return (*C.uint32_t)(p)
}

// strs copies each string and returns a C array of their pointers.
func (a *cAllocs) strs(what string, v []string) (**C.char, error) {
	if len(v) == 0 {
		return nil, nil
	}
	p := C.malloc(C.size_t(len(v)) * C.size_t(unsafe.Sizeof((*C.char)(nil))))
	*a = append(*a, p)
	array := unsafe.Slice((**C.char)(p), len(v))
	for i, s := range v {
		cs, err := a.str(what, s)
		if err != nil {
			return nil, err
		}
		array[i] = cs
	}
	return (**C.char)(p), nil
}

// goUint64s is the Go pointer form of a read-only array argument that libckpt copies during the call; nil for an
// empty v.
func goUint64s(v []uint64) *C.uint64_t {
	if len(v) == 0 {
		return nil
	}
	return (*C.uint64_t)(unsafe.Pointer(&v[0]))
}
