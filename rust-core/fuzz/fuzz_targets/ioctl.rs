//! The ioctl decoder on the mock kernel: sequences of every command and of
//! thread, DMA, release and policy events, checked against the reference
//! model of `knem_core::testing::fuzz::ioctl` (errnos, region table, user
//! memory, status slots, pinned pages; nothing left at the end).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    knem_core::testing::fuzz::ioctl::run(data);
});
