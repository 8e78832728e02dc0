//! Kernel (uverbs/ucma) forms of verbs data into the libibverbs forms the
//! application sees: QP attributes (INIT_QP_ATTR), address handles (UD
//! events) and path records (QUERY(PATH) → `route.path_rec`). Written from
//! the two headers' field lists; pure functions, unit-tested below.

use super::abi::*;
use rdma_abi::verbs::*;

pub fn ah_attr(k: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: k.grh.dgid },
            flow_label: k.grh.flow_label,
            sgid_index: k.grh.sgid_index,
            hop_limit: k.grh.hop_limit,
            traffic_class: k.grh.traffic_class,
        },
        dlid: k.dlid,
        sl: k.sl,
        src_path_bits: k.src_path_bits,
        static_rate: k.static_rate,
        is_global: k.is_global,
        port_num: k.port_num,
    }
}

/// Fills `a` from INIT_QP_ATTR's answer and returns the attribute mask.
/// Not inlined: rdma_init_qp_attr and the library's own transitions share it.
#[inline(never)]
pub fn qp_attr(k: &ib_uverbs_qp_attr, a: &mut ibv_qp_attr) -> i32 {
    a.qp_state = k.qp_state;
    a.cur_qp_state = k.cur_qp_state;
    a.path_mtu = k.path_mtu;
    a.path_mig_state = k.path_mig_state;
    a.qkey = k.qkey;
    a.rq_psn = k.rq_psn;
    a.sq_psn = k.sq_psn;
    a.dest_qp_num = k.dest_qp_num;
    a.qp_access_flags = k.qp_access_flags;
    a.cap = ibv_qp_cap {
        max_send_wr: k.max_send_wr,
        max_recv_wr: k.max_recv_wr,
        max_send_sge: k.max_send_sge,
        max_recv_sge: k.max_recv_sge,
        max_inline_data: k.max_inline_data,
    };
    a.ah_attr = ah_attr(&k.ah_attr);
    a.alt_ah_attr = ah_attr(&k.alt_ah_attr);
    a.pkey_index = k.pkey_index;
    a.alt_pkey_index = k.alt_pkey_index;
    a.en_sqd_async_notify = k.en_sqd_async_notify;
    a.sq_draining = k.sq_draining;
    a.max_rd_atomic = k.max_rd_atomic;
    a.max_dest_rd_atomic = k.max_dest_rd_atomic;
    a.min_rnr_timer = k.min_rnr_timer;
    a.port_num = k.port_num;
    a.timeout = k.timeout;
    a.retry_cnt = k.retry_cnt;
    a.rnr_retry = k.rnr_retry;
    a.alt_port_num = k.alt_port_num;
    a.alt_timeout = k.alt_timeout;
    k.qp_attr_mask as i32
}

/// The wire-format record inside a kernel path entry.
pub fn path_record(d: &ib_path_rec_data) -> ibv_path_record {
    // SAFETY: both are 64 bytes of plain data; the source is any bit pattern
    // the kernel wrote, which is a valid ibv_path_record; read_unaligned copes
    // with the 4-byte alignment of the source.
    unsafe { std::ptr::read_unaligned(d.path_rec.as_ptr() as *const ibv_path_record) }
}

/// One kernel path entry as the `ibv_sa_path_rec` librdmacm exposes in
/// `route.path_rec` (abi.md, "Filled from the kernel ... by converting ibv_path_data").
pub fn sa_path_rec(d: &ib_path_rec_data) -> ibv_sa_path_rec {
    let p = path_record(d);
    let fl_hop = u32::from_be(p.flowlabel_hoplimit);
    ibv_sa_path_rec {
        dgid: p.dgid,
        sgid: p.sgid,
        dlid: p.dlid,
        slid: p.slid,
        raw_traffic: 0,
        flow_label: (fl_hop >> 8).to_be(),
        hop_limit: fl_hop as u8,
        traffic_class: p.tclass,
        reversible: (p.reversible_numpath >> 7) as i32,
        numb_path: 1,
        pkey: p.pkey,
        sl: (u16::from_be(p.qosclass_sl) & 0xf) as u8,
        mtu_selector: 2,
        mtu: p.mtu & 0x1f,
        rate_selector: 2,
        rate: p.rate & 0x1f,
        packet_life_time_selector: 2,
        packet_life_time: p.packetlifetime & 0x1f,
        preference: d.flags as u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_entry_becomes_sa_path_rec() {
        let mut b = [0u8; 64];
        b[8] = 0xfe; // dgid
        b[24] = 0xfe; // sgid
        b[40..42].copy_from_slice(&0x1234u16.to_be_bytes()); // dlid
        b[44..48].copy_from_slice(&((0xabcde << 8 | 64u32).to_be_bytes())); // flow label, hop limit
        b[48] = 3; // tclass
        b[49] = 0x81; // reversible, numpath 1
        b[50..52].copy_from_slice(&0xffffu16.to_be_bytes());
        b[52..54].copy_from_slice(&0x0015u16.to_be_bytes()); // qos 1, sl 5
        b[54] = 0x80 | 3; // mtu 1024
        b[55] = 0x80 | 7;
        b[56] = 0x80 | 16;
        let mut d = ib_path_rec_data { flags: 0x2b, ..Default::default() };
        for (i, w) in d.path_rec.iter_mut().enumerate() {
            *w = u32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
        }
        let r = sa_path_rec(&d);
        // SAFETY: reading the raw member of a gid union.
        unsafe {
            assert_eq!(r.dgid.raw[0], 0xfe);
            assert_eq!(r.sgid.raw[0], 0xfe);
        }
        assert_eq!(u16::from_be(r.dlid), 0x1234);
        assert_eq!(u32::from_be(r.flow_label), 0xabcde);
        assert_eq!(r.hop_limit, 64);
        assert_eq!(r.traffic_class, 3);
        assert_eq!(r.reversible, 1);
        assert_eq!(r.pkey, 0xffffu16.to_be());
        assert_eq!(r.sl, 5);
        assert_eq!((r.mtu, r.mtu_selector), (3, 2));
        assert_eq!(r.rate, 7);
        assert_eq!(r.packet_life_time, 16);
        assert_eq!(r.preference, 0x2b);
    }

    #[test]
    fn qp_attr_fields_and_mask() {
        let k = ib_uverbs_qp_attr {
            qp_attr_mask: IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN,
            qp_state: IBV_QPS_RTR,
            dest_qp_num: 0x11,
            path_mtu: IBV_MTU_1024,
            max_dest_rd_atomic: 4,
            ah_attr: ib_uverbs_ah_attr {
                grh: ib_uverbs_global_route { dgid: [1; 16], sgid_index: 2, hop_limit: 9, ..Default::default() },
                is_global: 1,
                port_num: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        let m = qp_attr(&k, &mut a);
        assert_eq!(m as u32, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN);
        assert_eq!((a.qp_state, a.dest_qp_num, a.path_mtu, a.max_dest_rd_atomic), (IBV_QPS_RTR, 0x11, IBV_MTU_1024, 4));
        assert_eq!((a.ah_attr.grh.sgid_index, a.ah_attr.grh.hop_limit, a.ah_attr.is_global, a.ah_attr.port_num), (2, 9, 1, 1));
        // SAFETY: reading the raw member of a gid union.
        assert_eq!(unsafe { a.ah_attr.grh.dgid.raw }, [1; 16]);
    }
}
