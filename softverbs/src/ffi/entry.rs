//! How every function is exported: `export!` wraps the body in a panic boundary and turns
//! `Result<T, Errno>` into the C convention named by its first word:
//!
//! | word | on failure |
//! |---|---|
//! | `null` | errno set, returns NULL |
//! | `minus1` | errno set, returns -1 |
//! | `errno` | returns the positive errno value (errno untouched) |
//! | `neg` | returns the negative errno value |
//! | `void` | nothing |
//!
//! A panic is reported on stderr once per call and becomes EIO in that convention.

use crate::sys::{set_errno, Errno, Result};
use std::thread::Result as Caught;

fn caught(name: &str) -> Errno {
    eprintln!("libibverbs (softverbs): internal error in {name}; returning EIO");
    Errno::EIO
}

pub trait Null {
    fn null() -> Self;
}
impl<T> Null for *mut T {
    fn null() -> Self {
        std::ptr::null_mut()
    }
}
impl<T> Null for *const T {
    fn null() -> Self {
        std::ptr::null()
    }
}

pub fn null<T: Null>(name: &str, r: Caught<Result<T>>) -> T {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            T::null()
        }
        Err(_) => {
            set_errno(caught(name));
            T::null()
        }
    }
}

pub fn minus1(name: &str, r: Caught<Result<libc::c_int>>) -> libc::c_int {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(caught(name));
            -1
        }
    }
}

pub fn errno(name: &str, r: Caught<Result<libc::c_int>>) -> libc::c_int {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => e.0,
        Err(_) => caught(name).0,
    }
}

/// Integer return types that can carry a negative errno.
pub trait Code {
    fn code(v: i32) -> Self;
}
impl Code for i32 {
    fn code(v: i32) -> Self {
        v
    }
}
impl Code for isize {
    fn code(v: i32) -> Self {
        v as isize
    }
}

pub fn neg<T: Code>(name: &str, r: Caught<Result<T>>) -> T {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => T::code(-e.0),
        Err(_) => T::code(-caught(name).0),
    }
}

pub fn void(name: &str, r: Caught<Result<()>>) {
    if r.is_err() {
        caught(name);
    }
}

/// Passes a value through unchanged (for functions whose return is not an error code,
/// e.g. strings and rate conversions); a panic yields `fallback`.
pub fn value<T>(name: &str, r: Caught<Result<T>>, fallback: T) -> T {
    match r {
        Ok(Ok(v)) => v,
        _ => {
            if r.is_err() {
                caught(name);
            }
            fallback
        }
    }
}

/// The traced shape shared by `export!` and `op!`: `, trace [before] |pre, ret| text,`
/// after the signature. `before` (optional) runs ahead of the body, only when tracing, and
/// its value is bound to `pre`; `text` (a `String`, `(call, after)` or an `Option` of
/// either; `None` writes nothing) is built after the C return value `ret` is known.
macro_rules! traced_body {
    ($name:expr, $conv:ident $(($fb:expr))?, $ret:ty, [$($pre:expr)?], $p:pat, $r:ident, $tr:expr, $body:block) => {{
        let t0 = $crate::trace::start();
        let pre = $crate::trace::before(t0, || ($($pre)?));
        let r = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
            || -> $crate::sys::Result<$ret> { $body },
        ));
        let err = $crate::trace::err_of(t0, &r);
        let v = $crate::ffi::entry::$conv($name, r $(, $fb)?);
        if let (Some(t0), Some($p)) = (t0, pre) {
            $crate::trace::finish(t0, &v, err, |$r: &$ret| $tr);
        }
        v
    }};
}

macro_rules! export {
    ($(#[$m:meta])* $conv:ident fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $ret:ty, trace $([$pre:expr])? |$p:pat_param, $r:ident| $tr:expr, $body:block) => {
        $(#[$m])*
        #[no_mangle]
        #[allow(unused_unsafe, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            traced_body!(stringify!($name), $conv, $ret, [$($pre)?], $p, $r, $tr, $body)
        }
    };
    ($(#[$m:meta])* value($fb:expr) fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $ret:ty, trace $([$pre:expr])? |$p:pat_param, $r:ident| $tr:expr, $body:block) => {
        $(#[$m])*
        #[no_mangle]
        #[allow(unused_unsafe, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            traced_body!(stringify!($name), value($fb), $ret, [$($pre)?], $p, $r, $tr, $body)
        }
    };
    ($(#[$m:meta])* void fn $name:ident($($a:ident : $t:ty),* $(,)?), trace $([$pre:expr])? |$p:pat_param, $r:ident| $tr:expr, $body:block) => {
        $(#[$m])*
        #[no_mangle]
        #[allow(unused_unsafe, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($a: $t),*) {
            traced_body!(stringify!($name), void, (), [$($pre)?], $p, $r, $tr, $body)
        }
    };
    ($(#[$m:meta])* $conv:ident fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[no_mangle]
        #[allow(unused_unsafe, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            let r = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
                || -> $crate::sys::Result<$ret> { $body },
            ));
            $crate::ffi::entry::$conv(stringify!($name), r)
        }
    };
    ($(#[$m:meta])* value($fb:expr) fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[no_mangle]
        #[allow(unused_unsafe, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            let r = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
                || -> $crate::sys::Result<$ret> { $body },
            ));
            $crate::ffi::entry::value(stringify!($name), r, $fb)
        }
    };
    ($(#[$m:meta])* void fn $name:ident($($a:ident : $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[no_mangle]
        #[allow(unused_unsafe, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($a: $t),*) {
            let r = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
                || -> $crate::sys::Result<()> { $body },
            ));
            $crate::ffi::entry::void(stringify!($name), r)
        }
    };
}

/// Same shapes as `export!`, but not `#[no_mangle]`: dispatch-table entries
/// (`ctx->ops.*`, `verbs_context` members) reached through function pointers.
macro_rules! op {
    ($(#[$m:meta])* $conv:ident fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $ret:ty, trace $([$pre:expr])? |$p:pat_param, $r:ident| $tr:expr, $body:block) => {
        $(#[$m])*
        #[allow(unused_unsafe, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            traced_body!(stringify!($name), $conv, $ret, [$($pre)?], $p, $r, $tr, $body)
        }
    };
    ($(#[$m:meta])* $conv:ident fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[allow(unused_unsafe, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            let r = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
                || -> $crate::sys::Result<$ret> { $body },
            ));
            $crate::ffi::entry::$conv(stringify!($name), r)
        }
    };
}
