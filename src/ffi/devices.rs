//! rdma_get_devices(3), rdma_free_devices(3).

use crate::devices;
use crate::sys::Errno;
use rdma_abi::verbs::ibv_context;

entry! {
    fn rdma_get_devices(num_devices: *mut i32) -> *mut *mut ibv_context {
        let ctxs = match devices::contexts() {
            Ok(c) => c,
            Err(e) => {
                if !num_devices.is_null() {
                    // SAFETY: non-NULL; the caller gives a writable int.
                    unsafe { *num_devices = 0 };
                }
                return Err(e);
            }
        };
        // A NULL-terminated array from libc, freed by rdma_free_devices.
        // SAFETY: calloc; checked for NULL below.
        let list = unsafe { libc::calloc(ctxs.len() + 1, std::mem::size_of::<*mut ibv_context>()) }
            as *mut *mut ibv_context;
        if list.is_null() {
            return Err(Errno::ENOMEM);
        }
        for (i, c) in ctxs.iter().enumerate() {
            // SAFETY: list has ctxs.len() + 1 slots.
            unsafe { *list.add(i) = *c };
        }
        if !num_devices.is_null() {
            // SAFETY: non-NULL; the caller gives a writable int.
            unsafe { *num_devices = ctxs.len() as i32 };
        }
        Ok(list)
    }
}

entry! {
    fn rdma_free_devices(list: *mut *mut ibv_context) -> () {
        // Contexts stay open (they are shared with every id); only the array goes.
        // SAFETY: list is NULL or came from rdma_get_devices.
        unsafe { libc::free(list.cast()) };
        Ok(())
    }
}
