//! Data types: the library's dtype codes and the Rust element types that map to them.

use std::ffi::CStr;
use std::fmt;

use crate::sys;

/// A dtype code (`sys::CKPT_DTYPE_*`). A newtype rather than an enum: a checkpoint written by a newer library may
/// hold codes this binding does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType(pub i32);

impl DType {
    pub const BOOL: DType = DType(sys::CKPT_DTYPE_BOOL);
    pub const U8: DType = DType(sys::CKPT_DTYPE_U8);
    pub const I8: DType = DType(sys::CKPT_DTYPE_I8);
    pub const I16: DType = DType(sys::CKPT_DTYPE_I16);
    pub const U16: DType = DType(sys::CKPT_DTYPE_U16);
    pub const I32: DType = DType(sys::CKPT_DTYPE_I32);
    pub const U32: DType = DType(sys::CKPT_DTYPE_U32);
    pub const I64: DType = DType(sys::CKPT_DTYPE_I64);
    pub const U64: DType = DType(sys::CKPT_DTYPE_U64);
    pub const F16: DType = DType(sys::CKPT_DTYPE_F16);
    pub const BF16: DType = DType(sys::CKPT_DTYPE_BF16);
    pub const F32: DType = DType(sys::CKPT_DTYPE_F32);
    pub const F64: DType = DType(sys::CKPT_DTYPE_F64);
    pub const C64: DType = DType(sys::CKPT_DTYPE_C64);
    pub const F8_E4M3: DType = DType(sys::CKPT_DTYPE_F8_E4M3);
    pub const F8_E5M2: DType = DType(sys::CKPT_DTYPE_F8_E5M2);
    pub const C128: DType = DType(sys::CKPT_DTYPE_C128);
    pub const F8_E4M3FNUZ: DType = DType(sys::CKPT_DTYPE_F8_E4M3FNUZ);
    pub const F8_E5M2FNUZ: DType = DType(sys::CKPT_DTYPE_F8_E5M2FNUZ);
    pub const F8_E4M3B11FNUZ: DType = DType(sys::CKPT_DTYPE_F8_E4M3B11FNUZ);
    pub const F8_E3M4: DType = DType(sys::CKPT_DTYPE_F8_E3M4);
    pub const F8_E4M3_IEEE: DType = DType(sys::CKPT_DTYPE_F8_E4M3_IEEE);
    pub const F8_E8M0: DType = DType(sys::CKPT_DTYPE_F8_E8M0);
    /// Sub-byte types are held one element per byte, in its low bits.
    pub const F4_E2M1: DType = DType(sys::CKPT_DTYPE_F4_E2M1);
    pub const I4: DType = DType(sys::CKPT_DTYPE_I4);
    pub const U4: DType = DType(sys::CKPT_DTYPE_U4);
    pub const I2: DType = DType(sys::CKPT_DTYPE_I2);
    pub const U2: DType = DType(sys::CKPT_DTYPE_U2);

    /// Bytes per element; 0 for a code the library does not know.
    pub fn size(self) -> usize {
        // SAFETY: accepts any value.
        unsafe { sys::ckpt_dtype_size(self.0) as usize }
    }

    /// The library's name ("F32", "BF16"); "?" for an unknown code.
    pub fn name(self) -> &'static str {
        // SAFETY: never NULL, static storage.
        unsafe { CStr::from_ptr(sys::ckpt_dtype_name(self.0)) }.to_str().unwrap_or("?")
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The raw bits of an IEEE half-precision float, for F16 tensors.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct F16Bits(pub u16);

/// The raw bits of a bfloat16, for BF16 tensors.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Bf16Bits(pub u16);

mod sealed {
    pub trait Sealed {}
}

/// A Rust type whose values are stored as one element of a ckpt dtype. Sealed: the library writes raw bytes into
/// these types on load, so only types whose layout matches the dtype exactly are admitted.
pub trait Element: sealed::Sealed + Copy + Default + Send + Sync + 'static {
    const DTYPE: DType;

    /// Makes every element a valid value of `Self` after the library wrote raw bytes into it.
    ///
    /// # Safety
    /// `data` must point to `len` writable elements of `Self` that Rust code has not read since they were written.
    #[doc(hidden)]
    unsafe fn repair_raw(_data: *mut Self, _len: usize) {}
}

macro_rules! element {
    ($($rust:ty => $dtype:ident),* $(,)?) => {$(
        impl sealed::Sealed for $rust {}
        impl Element for $rust {
            const DTYPE: DType = DType::$dtype;
        }
    )*};
}

element!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64, i64 => I64,
    f32 => F32, f64 => F64, F16Bits => F16, Bf16Bits => BF16,
);

impl sealed::Sealed for bool {}

/// A BOOL element is one byte; a checkpoint (possibly written by another program) may hold any byte there, but
/// a Rust `bool` must be 0 or 1. Loads normalise every nonzero byte to 1 before Rust code sees the values.
impl Element for bool {
    const DTYPE: DType = DType::BOOL;

    unsafe fn repair_raw(data: *mut bool, len: usize) {
        let bytes = data as *mut u8;
        for i in 0..len {
            // SAFETY: within the caller's `len` elements of one byte each; read and written as u8 only.
            let byte = bytes.add(i);
            *byte = (*byte != 0) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element_matches_library_size<T: Element>() {
        assert_eq!(T::DTYPE.size(), std::mem::size_of::<T>(), "{}", T::DTYPE);
    }

    #[test]
    fn every_element_type_has_the_library_size_of_its_dtype() {
        element_matches_library_size::<bool>();
        element_matches_library_size::<u8>();
        element_matches_library_size::<i8>();
        element_matches_library_size::<u16>();
        element_matches_library_size::<i16>();
        element_matches_library_size::<u32>();
        element_matches_library_size::<i32>();
        element_matches_library_size::<u64>();
        element_matches_library_size::<i64>();
        element_matches_library_size::<f32>();
        element_matches_library_size::<f64>();
        element_matches_library_size::<F16Bits>();
        element_matches_library_size::<Bf16Bits>();
    }

    #[test]
    fn dtype_names_come_from_the_library() {
        assert_eq!(DType::BF16.to_string(), "BF16");
        assert_eq!(DType(1000).name(), "?");
        assert_eq!(DType(1000).size(), 0);
    }

    #[test]
    fn bool_repair_turns_any_nonzero_byte_into_true() {
        let raw = [0u8, 1, 2, 255];
        let mut values = [false; 4];
        // SAFETY: bytes are copied into `values` through a u8 pointer and repaired before being read as bool.
        unsafe {
            std::ptr::copy_nonoverlapping(raw.as_ptr(), values.as_mut_ptr() as *mut u8, 4);
            bool::repair_raw(values.as_mut_ptr(), 4);
        }
        assert_eq!(values, [false, true, true, true]);
    }
}
