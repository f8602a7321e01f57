//! Segment lists, seek, cursors and the copy planners, checked against the
//! flattened-offset model of `knem_core::harness::plan`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    knem_core::harness::plan::run(data);
});
