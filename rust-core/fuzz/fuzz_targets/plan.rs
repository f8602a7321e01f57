//! Segment lists, seek, cursors and the copy planners, checked against the
//! flattened-offset model of `knem_core::testing::fuzz::plan`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    knem_core::testing::fuzz::plan::run(data);
});
