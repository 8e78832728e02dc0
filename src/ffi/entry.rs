//! The one way a function is exported: `entry!` wraps the body in a panic
//! boundary, traces the call and turns `Result<T, Errno>` into the C
//! convention of the return type (set errno last, then -1 / NULL / …).
//! `stub!` exports a function that is not implemented yet (ENOSYS).

use crate::sys::{set_errno, Errno, Result};
use std::time::Instant;

/// How a C return type says "failed" (errno carries the reason).
pub trait CRet: Sized + std::fmt::Debug {
    fn failed() -> Self;
}

impl CRet for i32 {
    fn failed() -> Self {
        -1
    }
}
impl CRet for isize {
    fn failed() -> Self {
        -1
    }
}
impl CRet for i64 {
    fn failed() -> Self {
        -1
    }
}
impl CRet for usize {
    fn failed() -> Self {
        usize::MAX
    }
}
impl CRet for u16 {
    fn failed() -> Self {
        0
    }
}
impl CRet for () {
    fn failed() -> Self {}
}
impl<T> CRet for *mut T {
    fn failed() -> Self {
        std::ptr::null_mut()
    }
}
impl<T> CRet for *const T {
    fn failed() -> Self {
        std::ptr::null()
    }
}

/// A failed call's C result: errno set, then the return type's failure value.
#[inline]
pub fn fail<T: CRet>(e: Errno) -> T {
    set_errno(e);
    T::failed()
}

/// Converts the body's outcome; errno is set after every local of the body
/// has been dropped, so nothing can clobber it. Out of line: `entry!` returns
/// an untraced call's result itself, so the common call neither builds the
/// arguments' closure nor calls this.
#[cold]
#[inline(never)]
pub fn finish<T: CRet>(
    name: &str,
    t0: Option<Instant>,
    args: impl FnOnce() -> String,
    r: std::thread::Result<Result<T>>,
) -> T {
    match r {
        Ok(Ok(v)) => {
            crate::trace::emit(t0, || format!("{name}({}) = {v:?}", args()));
            v
        }
        Ok(Err(e)) => {
            crate::trace::emit(t0, || {
                format!("{name}({}) = {:?} errno {} ({})", args(), T::failed(), e.0, std::io::Error::from_raw_os_error(e.0))
            });
            fail(e)
        }
        Err(_) => {
            eprintln!("librdmacm (rdmacm-rs): internal error in {name}; returning EIO");
            fail(Errno::EIO)
        }
    }
}

macro_rules! entry {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[no_mangle]
        #[allow(clippy::not_unsafe_ptr_arg_deref, unused_unsafe)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let t0 = $crate::trace::start();
            let r = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
                || -> $crate::sys::Result<$ret> { $body },
            ));
            // Untraced, a return needs no more than errno (set after the body's
            // locals are dropped, as in `finish`).
            let r = match (t0.is_none(), r) {
                (true, Ok(Ok(v))) => return v,
                (true, Ok(Err(e))) => return $crate::ffi::entry::fail(e),
                (_, r) => r,
            };
            $crate::ffi::entry::finish(stringify!($name), t0, || {
                let parts: ::std::vec::Vec<::std::string::String> =
                    ::std::vec![$(format!("{:?}", $arg)),*];
                parts.join(", ")
            }, r)
        }
    };
}

/// Exported so programs load, but not implemented yet: -1/ENOSYS (or the
/// return type's failure value). docs/status.md lists every one.
macro_rules! stub {
    ($(fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        $(entry! {
            fn $name($($arg: $ty),*) -> $ret {
                $(let _ = $arg;)*
                Err($crate::sys::Errno::ENOSYS)
            }
        })*
    };
}

