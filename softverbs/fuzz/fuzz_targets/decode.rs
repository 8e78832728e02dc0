//! Feeds arbitrary bytes to the frame decoder, as a stream (TCP) and as one datagram (UDP):
//! it must never panic, and every accepted frame must re-encode to the same header bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softverbs::net::frame::{decode, DecodeError, HDR_LEN};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while !rest.is_empty() {
        match decode(rest) {
            Ok((h, total)) => {
                assert!(total >= HDR_LEN && total <= rest.len());
                assert!(h.validate().is_ok());
                let mut again = Vec::new();
                h.encode_into(&mut again);
                assert_eq!(&again[..], &rest[..HDR_LEN]);
                rest = &rest[total..];
            }
            Err(DecodeError::Incomplete(n)) => {
                assert!(n > rest.len());
                break;
            }
            Err(DecodeError::Malformed(_)) => break,
        }
    }
});
