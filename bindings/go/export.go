package ckpt

/*
#include "binding.h"
*/
import "C"

import "math"

// NoShardLimit, as ExportOptions.MaxShardBytes, puts every tensor of a directory export in model.safetensors.
const NoShardLimit = -1

// ExportOptions configure Export; nil exports every tensor, as stored, in files of at most 5 GB.
type ExportOptions struct {
	// MaxShardBytes bounds the tensor data of each file of a directory export (a larger tensor gets a file of
	// its own). 0: the library's default, 5 GB; NoShardLimit: a single file. A ".safetensors" output is always one
	// file.
	MaxShardBytes int64
	// Keys are the tensors to export; nil: every tensor. ErrNotFound names a key the checkpoint lacks.
	Keys []string
	// PartIndex and PartCount share one export among PartCount processes: each plans the same files and writes
	// those whose number is PartIndex modulo PartCount; part 0 also writes the index. PartCount 0: one part.
	PartIndex, PartCount int
	// Dtype converts the floating tensors to DtypeF16, DtypeBF16, DtypeF32 or DtypeF64 (rounded to nearest even),
	// the others staying as stored; 0: every tensor as stored. ErrInvalidArgument for a dtype that is not floating.
	Dtype Dtype
}

// Export writes the tensors of the committed checkpoint at `checkpoint` to safetensors, each whole whatever chunks
// saved it. Any process may call it; nothing is collective and no Context is needed. An `out` ending in
// ".safetensors" is one file; otherwise it is a directory (created if needed) that receives model.safetensors, or
// numbered files and model.safetensors.index.json once the data exceeds MaxShardBytes. Every file's header
// carries the checkpoint's user metadata; objects and common entries are left out. An existing file is never
// replaced (ErrAlreadyExists); every block read is checked against its checksum (ErrCorrupt); ErrUnsupported for
// a tensor whose dtype safetensors cannot name.
func Export(checkpoint, out string, opts *ExportOptions) error {
	var allocs cAllocs
	defer allocs.free()
	ccheckpoint, err := allocs.str("checkpoint path", checkpoint)
	if err != nil {
		return err
	}
	cout, err := allocs.str("export path", out)
	if err != nil {
		return err
	}
	copts, err := opts.toC(&allocs)
	if err != nil {
		return err
	}
	return call(func(cerr *C.ckpt_error_t) C.int32_t { return C.ckpt_export(ccheckpoint, cout, &copts, cerr) })
}

func (o *ExportOptions) toC(allocs *cAllocs) (C.ckpt_export_options, error) {
	copts := C.ckpt_go_export_options()
	if o == nil {
		return copts, nil
	}
	switch {
	case o.MaxShardBytes == NoShardLimit:
		copts.max_shard_bytes = 0
	case o.MaxShardBytes < 0:
		return copts, invalidArgument("max shard bytes %d is out of range", o.MaxShardBytes)
	case o.MaxShardBytes > 0:
		copts.max_shard_bytes = C.uint64_t(o.MaxShardBytes)
	}
	var err error
	if copts.keys, err = allocs.strs("export key", o.Keys); err != nil {
		return copts, err
	}
	copts.key_count = C.uint64_t(len(o.Keys))
	if o.PartCount != 0 {
		if o.PartCount < 0 || o.PartCount > math.MaxUint32 || o.PartIndex < 0 || o.PartIndex >= o.PartCount {
			return copts, invalidArgument("part %d of %d is out of range", o.PartIndex, o.PartCount)
		}
		copts.part_index = C.uint32_t(o.PartIndex)
		copts.part_count = C.uint32_t(o.PartCount)
	} else if o.PartIndex != 0 {
		return copts, invalidArgument("part index %d is set but part count is 0 (one part)", o.PartIndex)
	}
	copts.dtype = C.int32_t(o.Dtype)
	return copts, nil
}
