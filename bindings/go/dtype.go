package ckpt

/*
#include <ckpt.h>
*/
import "C"

// Dtype is the element type of a tensor; the values are libckpt's pinned CKPT_DTYPE_* numbers.
type Dtype int32

const (
	DtypeBool   Dtype = C.CKPT_DTYPE_BOOL
	DtypeU8     Dtype = C.CKPT_DTYPE_U8
	DtypeI8     Dtype = C.CKPT_DTYPE_I8
	DtypeI16    Dtype = C.CKPT_DTYPE_I16
	DtypeU16    Dtype = C.CKPT_DTYPE_U16
	DtypeI32    Dtype = C.CKPT_DTYPE_I32
	DtypeU32    Dtype = C.CKPT_DTYPE_U32
	DtypeI64    Dtype = C.CKPT_DTYPE_I64
	DtypeU64    Dtype = C.CKPT_DTYPE_U64
	DtypeF16    Dtype = C.CKPT_DTYPE_F16
	DtypeBF16   Dtype = C.CKPT_DTYPE_BF16
	DtypeF32    Dtype = C.CKPT_DTYPE_F32
	DtypeF64    Dtype = C.CKPT_DTYPE_F64
	DtypeC64    Dtype = C.CKPT_DTYPE_C64
	DtypeF8E4M3 Dtype = C.CKPT_DTYPE_F8_E4M3
	DtypeF8E5M2 Dtype = C.CKPT_DTYPE_F8_E5M2
	DtypeC128   Dtype = C.CKPT_DTYPE_C128
	// The other float8 types of ml_dtypes and JAX.
	DtypeF8E4M3FNUZ    Dtype = C.CKPT_DTYPE_F8_E4M3FNUZ
	DtypeF8E5M2FNUZ    Dtype = C.CKPT_DTYPE_F8_E5M2FNUZ
	DtypeF8E4M3B11FNUZ Dtype = C.CKPT_DTYPE_F8_E4M3B11FNUZ
	DtypeF8E3M4        Dtype = C.CKPT_DTYPE_F8_E3M4
	DtypeF8E4M3IEEE    Dtype = C.CKPT_DTYPE_F8_E4M3_IEEE
	DtypeF8E8M0        Dtype = C.CKPT_DTYPE_F8_E8M0
	// Sub-byte types, held one element per byte in its low bits.
	DtypeF4E2M1 Dtype = C.CKPT_DTYPE_F4_E2M1
	DtypeI4     Dtype = C.CKPT_DTYPE_I4
	DtypeU4     Dtype = C.CKPT_DTYPE_U4
	DtypeI2     Dtype = C.CKPT_DTYPE_I2
	DtypeU2     Dtype = C.CKPT_DTYPE_U2
)

// Size is the size in bytes of one element, 0 for an unknown dtype.
func (d Dtype) Size() int {
	return int(C.ckpt_dtype_size(C.int32_t(d)))
}

// String is the dtype's name ("F32", "BF16", ...), "?" for an unknown dtype.
func (d Dtype) String() string {
	return C.GoString(C.ckpt_dtype_name(C.int32_t(d)))
}
