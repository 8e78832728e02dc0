//! `#[repr(C)]` mirrors of the public C types librdmacm and libibverbs share with
//! applications. No logic lives here: only types, constants and their layout proofs
//! (`tests/layout.rs` compares every size and offset with the system headers).
#![allow(non_camel_case_types, non_upper_case_globals)]
#![no_std]

pub mod cma;
pub mod softverbs;
pub mod verbs;
