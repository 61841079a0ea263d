//! The error type: the library's status code and message, and the plumbing that collects them from a C call.

use std::ffi::CStr;
use std::fmt;
use std::ptr;

use crate::sys;

/// A failed call: the library's status code (one of the `sys::CKPT_E_*` constants) and its message, which names
/// what is wrong (key, rank, file, offset). Errors detected by the binding itself before calling the library use
/// the status the library would have used (`CKPT_E_INVALID_ARGUMENT` for a bad argument).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: i32,
    message: String,
}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// A Rust-side classification of [`Error::status`], for matching. Codes this binding does not know (from a newer
/// library) map to `Other`; new variants may be added, so matches need a wildcard arm.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    Mismatch,
    Corrupt,
    Version,
    Io,
    NoSpace,
    Timeout,
    PeerFailed,
    Unsupported,
    NoMemory,
    InProgress,
    Internal,
    Other(i32),
}

impl Error {
    /// An error with the given status and message.
    pub fn new(status: i32, message: impl Into<String>) -> Self {
        Error { status, message: message.into() }
    }

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Self {
        Error::new(sys::CKPT_E_INVALID_ARGUMENT, message)
    }

    /// The status code: one of the `sys::CKPT_E_*` constants.
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The library's message.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn kind(&self) -> ErrorKind {
        match self.status {
            sys::CKPT_E_INVALID_ARGUMENT => ErrorKind::InvalidArgument,
            sys::CKPT_E_NOT_FOUND => ErrorKind::NotFound,
            sys::CKPT_E_ALREADY_EXISTS => ErrorKind::AlreadyExists,
            sys::CKPT_E_MISMATCH => ErrorKind::Mismatch,
            sys::CKPT_E_CORRUPT => ErrorKind::Corrupt,
            sys::CKPT_E_VERSION => ErrorKind::Version,
            sys::CKPT_E_IO => ErrorKind::Io,
            sys::CKPT_E_NO_SPACE => ErrorKind::NoSpace,
            sys::CKPT_E_TIMEOUT => ErrorKind::Timeout,
            sys::CKPT_E_PEER_FAILED => ErrorKind::PeerFailed,
            sys::CKPT_E_UNSUPPORTED => ErrorKind::Unsupported,
            sys::CKPT_E_NO_MEMORY => ErrorKind::NoMemory,
            sys::CKPT_E_IN_PROGRESS => ErrorKind::InProgress,
            sys::CKPT_E_INTERNAL => ErrorKind::Internal,
            other => ErrorKind::Other(other),
        }
    }
}

/// The constant's name of a status code ("CKPT_E_CORRUPT"), from the library's own description.
fn status_name(status: i32) -> String {
    // SAFETY: ckpt_status_string never returns NULL and points to static storage.
    let description = unsafe { CStr::from_ptr(sys::ckpt_status_string(status)) }.to_string_lossy();
    match description.split_once(':') {
        Some((name, _)) => name.to_owned(),
        None => format!("ckpt status {}", status),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", status_name(self.status))
        } else {
            write!(f, "{}: {}", status_name(self.status), self.message)
        }
    }
}

impl std::error::Error for Error {}

/// A C error object for the duration of one call. If it cannot be allocated, the call still runs with a NULL
/// `err` and the error carries the status alone.
struct ErrorSlot(*mut sys::ckpt_error_t);

impl ErrorSlot {
    fn new() -> Self {
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer; on failure it stays NULL, which every call accepts.
        unsafe { sys::ckpt_error_create(&mut raw) };
        ErrorSlot(raw)
    }

    fn to_error(&self, status: i32) -> Error {
        if self.0.is_null() {
            return Error::new(status, "");
        }
        // SAFETY: the error object is live and its message is a NUL-terminated string it owns.
        let message = unsafe { CStr::from_ptr(sys::ckpt_error_message(self.0)) };
        Error::new(status, message.to_string_lossy().into_owned())
    }
}

impl Drop for ErrorSlot {
    fn drop(&mut self) {
        // SAFETY: created by ckpt_error_create (or NULL, which ckpt_error_free accepts).
        unsafe { sys::ckpt_error_free(self.0) }
    }
}

/// Runs one C call with a fresh error object and returns its raw status together with the error it describes.
/// Used where a status other than CKPT_OK is not a failure (CKPT_E_IN_PROGRESS).
pub(crate) fn call_status<F>(f: F) -> (i32, Option<Error>)
where
    F: FnOnce(*mut sys::ckpt_error_t) -> i32,
{
    let slot = ErrorSlot::new();
    let status = f(slot.0);
    if status == sys::CKPT_OK {
        (status, None)
    } else {
        (status, Some(slot.to_error(status)))
    }
}

/// Runs one C call with a fresh error object and turns its status into a `Result`.
pub(crate) fn call<F>(f: F) -> Result<()>
where
    F: FnOnce(*mut sys::ckpt_error_t) -> i32,
{
    match call_status(f) {
        (_, None) => Ok(()),
        (_, Some(error)) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_status_and_the_message() {
        let error = Error::new(sys::CKPT_E_MISMATCH, "tensor 'w': dtype F32 vs I32");
        assert_eq!(error.to_string(), "CKPT_E_MISMATCH: tensor 'w': dtype F32 vs I32");
    }

    #[test]
    fn display_of_unknown_status_shows_its_number() {
        assert_eq!(Error::new(99, "").to_string(), "ckpt status 99");
    }

    #[test]
    fn kind_maps_every_pinned_status_and_keeps_unknown_ones() {
        assert_eq!(Error::new(sys::CKPT_E_NOT_FOUND, "").kind(), ErrorKind::NotFound);
        assert_eq!(Error::new(sys::CKPT_E_INTERNAL, "").kind(), ErrorKind::Internal);
        assert_eq!(Error::new(77, "").kind(), ErrorKind::Other(77));
    }

    #[test]
    fn failed_call_carries_the_library_message() {
        let error = call(|err| unsafe { sys::ckpt_reader_open(ptr::null(), &mut ptr::null_mut(), err) })
            .expect_err("a NULL path must fail");
        assert_eq!(error.status(), sys::CKPT_E_INVALID_ARGUMENT);
        assert!(!error.message().is_empty(), "{}", error);
    }
}
