//! A `/dev/infiniband/rdma_cm` file and its write() command protocol
//! (kernel-abi.md §2): every command is a single write of an 8-byte header
//! plus the command struct; responses land in a buffer whose address travels
//! inside the command. Each event channel has its own file, as upstream's
//! does: the kernel ids on it and their events in one FIFO (`source`).

use super::abi::*;
use crate::sys::{Errno, Result};
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const DEVICE: &str = "/dev/infiniband/rdma_cm";

pub struct Ucma {
    fd: OwnedFd,
}

/// A command as written: header, then the command struct.
#[repr(C)]
struct Cmd<T> {
    hdr: rdma_ucm_cmd_hdr,
    body: T,
}

impl<T: Default> Cmd<T> {
    /// A command with an all-default body, filled in place by the caller
    /// (socket addresses are 128 bytes each: no copies through the stack).
    fn new(cmd: u32, out: usize) -> Cmd<T> {
        Cmd { hdr: rdma_ucm_cmd_hdr { cmd, in_: size_of::<T>() as u16, out: out as u16 }, body: T::default() }
    }
}

/// An ACCEPT command, built and not yet sent (`Ucma::accept_cmd`).
pub struct Accept(Cmd<rdma_ucm_accept>);

/// QUERY(PATH)'s answer.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct PathResp {
    head: rdma_ucm_query_path_resp,
    paths: [ib_path_rec_data; 6],
}

/// Copies a socket address (at most 128 bytes) into a command's field.
fn put_addr(dst: &mut kernel_sockaddr_storage, b: &[u8]) {
    let n = b.len().min(128);
    dst.0[..n].copy_from_slice(&b[..n]);
}

/// The address of a response buffer, as the kernel wants it.
fn addr_of<T>(r: &mut T) -> u64 {
    r as *mut T as u64
}

/// Reads the ABI version the kernel advertises (sysfs; 4 when not found).
fn abi_version() -> u32 {
    for p in ["/sys/class/misc/rdma_cm/abi_version", "/sys/class/infiniband_ucma/abi_version"] {
        if let Ok(s) = std::fs::read_to_string(p) {
            if let Ok(v) = s.trim().parse() {
                return v;
            }
        }
    }
    RDMA_USER_CM_ABI_VERSION
}

impl Ucma {
    pub fn open() -> Result<Ucma> {
        // ABI 3 kernels (before 2.6.24) lack the commands used here.
        if abi_version() != RDMA_USER_CM_ABI_VERSION {
            return Err(Errno(libc::EPERM));
        }
        let path = std::ffi::CString::new(DEVICE).map_err(|_| Errno::EINVAL)?;
        // SAFETY: a NUL-terminated path; the result is checked.
        // Blocking, as upstream's: GET_EVENT waits in the kernel unless the
        // application sets O_NONBLOCK on the channel's fd (this file).
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: fd was just returned by open and is owned by nobody else.
        Ok(Ucma { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    pub fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Writes one command; `out` is the size of the response buffer named in `body`.
    fn write<T: Copy>(&self, cmd: u32, body: &T, out: usize) -> Result<()> {
        let c = Cmd { hdr: rdma_ucm_cmd_hdr { cmd, in_: size_of::<T>() as u16, out: out as u16 }, body: *body };
        self.send(&c)
    }

    /// Writes a command built in place (`Cmd::new`).
    fn send<T>(&self, c: &Cmd<T>) -> Result<()> {
        self.send_bytes((c as *const Cmd<T>).cast(), size_of::<Cmd<T>>())
    }

    /// The one write(2) of every command. Not inlined: each command's own
    /// code stays the filling of its struct (under qemu's TCG, the
    /// benchmark's guest, every distinct instruction costs a translation).
    #[inline(never)]
    fn send_bytes(&self, c: *const u8, len: usize) -> Result<()> {
        self.send_raw(c, len, true)
    }

    /// `send_bytes`; `restart`: a signal's EINTR writes again (commands the
    /// kernel does not wait in), else it is the caller's (GET_EVENT).
    fn send_raw(&self, c: *const u8, len: usize, restart: bool) -> Result<()> {
        loop {
            // SAFETY: the ucma write() boundary: `c` is a live, fully initialised
            // header + command of `len` bytes (`send`); any response pointer inside
            // refers to a live buffer of at least the header's `out` bytes owned by
            // the caller.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), c.cast(), len) };
            if n < 0 {
                let e = Errno::last();
                if e.0 == libc::EINTR && restart {
                    continue;
                }
                return Err(e);
            }
            return if n as usize == len { Ok(()) } else { Err(Errno::ENODATA) };
        }
    }

    pub fn create_id(&self, uid: u64, ps: u32, qp_type: u32) -> Result<u32> {
        let mut resp = rdma_ucm_create_id_resp::default();
        let c = rdma_ucm_create_id { uid, response: addr_of(&mut resp), ps: ps as u16, qp_type: qp_type as u8, reserved: [0; 5] };
        self.write(CMD_CREATE_ID, &c, size_of_val(&resp))?;
        Ok(resp.id)
    }

    /// Destroys a kernel id (its unread events go with it); returns how many
    /// events the kernel reported for it.
    pub fn destroy_id(&self, id: u32) -> Result<u32> {
        let mut resp = rdma_ucm_destroy_id_resp::default();
        let c = rdma_ucm_destroy_id { response: addr_of(&mut resp), id, reserved: 0 };
        self.write(CMD_DESTROY_ID, &c, size_of_val(&resp))?;
        Ok(resp.events_reported)
    }

    pub fn bind(&self, id: u32, addr: &[u8]) -> Result<()> {
        let mut c = Cmd::<rdma_ucm_bind>::new(CMD_BIND, 0);
        c.body.id = id;
        c.body.addr_size = addr.len() as u16;
        put_addr(&mut c.body.addr, addr);
        self.send(&c)
    }

    pub fn resolve_addr(&self, id: u32, src: Option<&[u8]>, dst: &[u8], timeout_ms: u32) -> Result<()> {
        let mut c = Cmd::<rdma_ucm_resolve_addr>::new(CMD_RESOLVE_ADDR, 0);
        c.body.id = id;
        c.body.timeout_ms = timeout_ms;
        if let Some(src) = src {
            c.body.src_size = src.len() as u16;
            put_addr(&mut c.body.src_addr, src);
        }
        c.body.dst_size = dst.len() as u16;
        put_addr(&mut c.body.dst_addr, dst);
        self.send(&c)
    }

    pub fn resolve_route(&self, id: u32, timeout_ms: u32) -> Result<()> {
        self.write(CMD_RESOLVE_ROUTE, &rdma_ucm_resolve_route { id, timeout_ms }, 0)
    }

    /// QUERY with option ADDR or GID (both answer with `rdma_ucm_query_addr_resp`).
    /// The answer lands in `resp` (the caller's: no copy of it on return);
    /// old kernels leave `ibdev_index` alone, so it says "unknown" unless filled.
    pub fn query_addr(&self, id: u32, option: u32, resp: &mut rdma_ucm_query_addr_resp) -> Result<()> {
        resp.ibdev_index = u32::MAX;
        let c = rdma_ucm_query { response: addr_of(resp), id, option };
        self.write(CMD_QUERY, &c, size_of_val(resp))
    }

    /// QUERY(PATH) into `resp` (room for 6 records, as upstream asks): the
    /// records the kernel gave.
    pub fn query_path<'a>(&self, id: u32, resp: &'a mut PathResp) -> Result<&'a [ib_path_rec_data]> {
        let c = rdma_ucm_query { response: addr_of(resp), id, option: QUERY_PATH };
        self.write(CMD_QUERY, &c, size_of::<PathResp>())?;
        let n = (resp.head.num_paths as usize).min(6);
        Ok(&resp.paths[..n])
    }

    /// CONNECT; `conn` fills the connection parameters in place.
    pub fn connect(&self, id: u32, conn: impl FnOnce(&mut rdma_ucm_conn_param) -> Result<()>, ece: rdma_ucm_ece) -> Result<()> {
        let mut c = Cmd::<rdma_ucm_connect>::new(CMD_CONNECT, 0);
        conn(&mut c.body.conn_param)?;
        c.body.id = id;
        c.body.ece = ece;
        self.send(&c)
    }

    pub fn listen(&self, id: u32, backlog: i32) -> Result<()> {
        // The kernel turns 0/negative (and too large) into its maximum.
        self.write(CMD_LISTEN, &rdma_ucm_listen { id, backlog: backlog as u32 }, 0)
    }

    /// ACCEPT: `conn` with `valid` set accepts a request (and sets the id's
    /// uid, so its events start flowing); `valid` 0 sends the RTU of an
    /// active connection whose reply was processed here.
    pub fn accept(&self, id: u32, uid: u64, conn: impl FnOnce(&mut rdma_ucm_conn_param) -> Result<()>, ece: rdma_ucm_ece) -> Result<()> {
        self.send_accept(&Self::accept_cmd(id, uid, conn, ece)?)
    }

    /// An ACCEPT made ready (under the id's lock) to be sent later (`send_accept`, outside it).
    pub fn accept_cmd(id: u32, uid: u64, conn: impl FnOnce(&mut rdma_ucm_conn_param) -> Result<()>, ece: rdma_ucm_ece) -> Result<Accept> {
        let mut c = Cmd::<rdma_ucm_accept>::new(CMD_ACCEPT, 0);
        conn(&mut c.body.conn_param)?;
        c.body.uid = uid;
        c.body.id = id;
        c.body.ece = ece;
        Ok(Accept(c))
    }

    pub fn send_accept(&self, a: &Accept) -> Result<()> {
        self.send(&a.0)
    }

    /// ACCEPT without connection parameters: the RTU of an active side
    /// whose reply was processed here (rdma_establish, CONNECT_RESPONSE).
    pub fn rtu(&self, id: u32) -> Result<()> {
        self.accept(id, 0, |_| Ok(()), rdma_ucm_ece::default())
    }

    pub fn reject(&self, id: u32, reason: u8, data: &[u8]) -> Result<()> {
        if data.len() > 256 {
            return Err(Errno::EINVAL);
        }
        let mut c = rdma_ucm_reject { id, private_data_len: data.len() as u8, reason, ..Default::default() };
        c.private_data[..data.len()].copy_from_slice(data);
        self.write(CMD_REJECT, &c, 0)
    }

    pub fn disconnect(&self, id: u32) -> Result<()> {
        self.write(CMD_DISCONNECT, &rdma_ucm_disconnect { id }, 0)
    }

    /// INIT_QP_ATTR into `resp` (the caller's).
    pub fn init_qp_attr(&self, id: u32, qp_state: u32, resp: &mut ib_uverbs_qp_attr) -> Result<()> {
        let c = rdma_ucm_init_qp_attr { response: addr_of(resp), id, qp_state };
        self.write(CMD_INIT_QP_ATTR, &c, size_of_val(resp))
    }

    /// The file's next event: waits for one unless the file is non-blocking
    /// (EAGAIN); a signal handler ends the wait with EINTR unless it was
    /// installed with SA_RESTART (the kernel restarts the write then).
    /// Into `resp` (the caller's, zeroed: an older kernel's answer is shorter).
    pub fn get_event(&self, resp: &mut rdma_ucm_event_resp) -> Result<()> {
        let mut c = Cmd::<rdma_ucm_get_event>::new(CMD_GET_EVENT, size_of_val(resp));
        c.body.response = addr_of(resp);
        self.send_raw((&c as *const Cmd<rdma_ucm_get_event>).cast(), size_of_val(&c), false)
    }

    pub fn set_option(&self, id: u32, level: u32, optname: u32, val: &[u8]) -> Result<()> {
        let c = rdma_ucm_set_option { optval: val.as_ptr() as u64, id, level, optname, optlen: val.len() as u32 };
        self.write(CMD_SET_OPTION, &c, 0)
    }

    pub fn notify(&self, id: u32, event: u32) -> Result<()> {
        self.write(CMD_NOTIFY, &rdma_ucm_notify { id, event }, 0)
    }

    /// JOIN_MCAST: returns the kernel's handle for the membership.
    pub fn join_mcast(&self, id: u32, uid: u64, addr: &[u8], join_flags: u32) -> Result<u32> {
        let mut resp = rdma_ucm_create_id_resp::default();
        let mut c = Cmd::<rdma_ucm_join_mcast>::new(CMD_JOIN_MCAST, size_of_val(&resp));
        c.body.response = addr_of(&mut resp);
        c.body.uid = uid;
        c.body.id = id;
        c.body.addr_size = addr.len() as u16;
        c.body.join_flags = join_flags as u16;
        put_addr(&mut c.body.addr, addr);
        self.send(&c)?;
        Ok(resp.id)
    }

    /// MIGRATE_ID, written on this (the new) file: the id and its unread
    /// events move here from the file `from`.
    pub fn migrate_id(&self, id: u32, from: i32) -> Result<u32> {
        let mut resp = rdma_ucm_migrate_resp::default();
        let c = rdma_ucm_migrate_id { response: addr_of(&mut resp), id, fd: from as u32 };
        self.write(CMD_MIGRATE_ID, &c, size_of_val(&resp))?;
        Ok(resp.events_reported)
    }

    pub fn leave_mcast(&self, mc: u32) -> Result<u32> {
        let mut resp = rdma_ucm_destroy_id_resp::default();
        let c = rdma_ucm_destroy_id { response: addr_of(&mut resp), id: mc, reserved: 0 };
        self.write(CMD_LEAVE_MCAST, &c, size_of_val(&resp))?;
        Ok(resp.events_reported)
    }
}
