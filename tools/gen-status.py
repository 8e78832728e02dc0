#!/usr/bin/env python3
"""Writes README.md's function status table (between the status markers) from
the symbol lists and the facts below; run after changing what a function does."""
import pathlib, re

root = pathlib.Path(__file__).resolve().parent.parent
syms = [l.split() for l in (root / "abi-tests/expected-symbols.txt").read_text().splitlines() if l.strip()]
syms += [l.split() for l in (root / "abi-tests/rs-symbols.txt").read_text().splitlines() if l.strip()]

CORE = "works with or without a device"
DEVICE = "works on the kernel CM (rxe/siw, checked in the VM) and the soft fabric · no device: ENODEV"
notes = {
    "rdma_bind_addr": "works on the kernel CM (rxe/siw, checked in the VM; AF_IB too, `dev_af_ib`) and the soft fabric (no AF_IB: EINVAL, as upstream's without AF_IB support) · no device: ENODEV",
    "rdma_create_event_channel": CORE + "; the first one on the kernel CM runs upstream's AF_IB probe",
    "rdma_set_option": "TOS, REUSEADDR, AFONLY, ACK_TIMEOUT, IB_PATH checked like the kernel (ENOSYS/EINVAL); applied by the backend",
    "rdma_get_request": CORE + " (EINVAL unless the listener is synchronous)",
    "rdma_write_cm_event": CORE + ": a USER event on the id's own channel, on every kernel",
    "rdma_resolve_addrinfo": CORE + ": resolved in userspace, ADDRINFO_RESOLVED/ERROR on the id's channel (RAI_SA: ENODEV)",
    "rdma_query_addrinfo": CORE,
    "rdma_getaddrinfo": CORE + " (libc resolution, upstream's conversion; RAI_SA: ENODEV)",
    "rdma_get_devices": CORE + ": NULL-terminated list, empty when no device",
    "rdma_set_local_ece": CORE + " (EINVAL with a QP, vendor 0 or comp_mask)",
    "rdma_get_remote_ece": CORE + " (EINVAL with a QP)",
    "rdma_establish": "EINVAL if the id has a QP; else " + DEVICE,
    "rdma_create_qp": DEVICE + "; one QP per id (EINVAL), the id's SRQ when none is given (`dev_qp_srq`)",
    "rdma_create_qp_ex": DEVICE + "; beyond a PD, the provider's extended create (rxe: the `ibv_wr_*` API), EOPNOTSUPP without one, as upstream (`dev_qp_srq`)",
    "rdma_create_srq_ex": DEVICE + "; basic SRQs, others through the provider; XRC needs the caller's XRC domain and CQ (EOPNOTSUPP: the library opens none)",
}
core = {"rdma_create_event_channel", "rdma_destroy_event_channel", "rdma_create_id", "rdma_destroy_id",
        "rdma_get_cm_event", "rdma_ack_cm_event", "rdma_event_str", "rdma_migrate_id", "rdma_freeaddrinfo",
        "rdma_get_src_port", "rdma_get_dst_port", "rdma_free_devices", "rdma_destroy_qp", "rdma_destroy_srq",
        "rdma_destroy_ep"}
passthru = {"rpoll", "rselect", "repoll_create", "repoll_ctl", "repoll_wait"}
rows = []
for node, s in syms:
    if s in notes:
        st = notes[s]
    elif s in core:
        st = CORE
    elif s in passthru:
        st = "rsockets and plain fds: soft fabric, rxe and siw (checked in the VM)"
    elif node == "RDMACM_RS_1.0":
        st = "rdma_verbs.h helper as a real function (for FFI callers)"
    elif not s.startswith("rdma_"):
        st = "rsocket: soft fabric, rxe and siw, wire-compatible with Debian's (checked in the VM; siw has no UD QPs: datagram sends fail with EOPNOTSUPP, as Debian's)"
    else:
        st = DEVICE
    rows.append(f"| `{s}` | {node} | {st} |")
table = "| function | node | status |\n|---|---|---|\n" + "\n".join(rows) + "\n"
readme = root / "README.md"
text = readme.read_text()
new = re.sub(r"(<!-- status:begin -->\n).*?(<!-- status:end -->)", lambda m: m.group(1) + table + m.group(2), text, flags=re.S)
readme.write_text(new)
