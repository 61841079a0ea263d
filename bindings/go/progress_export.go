package ckpt

// The C entry of progress callbacks, alone in its file: cgo copies the preamble of a file with //export into two C
// files, so it may hold declarations only.

/*
#include <stdint.h>
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// ckptGoProgress is the ckpt_progress_fn of every callback (binding.h): `user` is the cgo.Handle of the Go
// function, kept until no call can come (see progressHandle).
//
//export ckptGoProgress
func ckptGoProgress(user unsafe.Pointer, phase C.int32_t, done, total C.uint64_t) {
	report := cgo.Handle(uintptr(user)).Value().(func(Progress))
	report(Progress{Phase: Phase(phase), Done: uint64(done), Total: uint64(total)})
}
