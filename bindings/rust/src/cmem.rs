//! Views of memory the library hands out: strings and byte ranges that it owns, and buffers it fills.

use std::ffi::CStr;
use std::os::raw::c_char;
use std::slice;

/// A slice over C memory. A zero length may come with a NULL pointer, which a slice may not hold.
///
/// # Safety
/// Unless `len` is 0, `data` must point to `len` readable bytes that stay valid and unmodified for `'b`.
pub(crate) unsafe fn bytes_or_empty<'b>(data: *const u8, len: usize) -> &'b [u8] {
    if len == 0 || data.is_null() {
        &[]
    } else {
        slice::from_raw_parts(data, len)
    }
}

/// The mutable counterpart of [`bytes_or_empty`].
///
/// # Safety
/// Unless `len` is 0, `data` must point to `len` writable bytes that nothing else accesses for `'b`.
pub(crate) unsafe fn bytes_or_empty_mut<'b>(data: *mut u8, len: usize) -> &'b mut [u8] {
    if len == 0 || data.is_null() {
        &mut []
    } else {
        slice::from_raw_parts_mut(data, len)
    }
}

/// Copies a C string owned by the library; NULL reads as empty, invalid UTF-8 is replaced.
///
/// # Safety
/// `text` is NULL or a NUL-terminated string valid for the duration of the call.
pub(crate) unsafe fn string_from_c(text: *const c_char) -> String {
    if text.is_null() {
        String::new()
    } else {
        CStr::from_ptr(text).to_string_lossy().into_owned()
    }
}
