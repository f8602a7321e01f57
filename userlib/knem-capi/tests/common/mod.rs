//! Helpers the C API's integration tests share: the last error as text,
//! and a team of threads of this process.

use knem_rs::*;
use libc::c_int;
use std::ffi::{CStr, CString};
use std::ptr::null_mut;

pub fn last() -> String {
    // SAFETY: the API returns a valid C string.
    unsafe { CStr::from_ptr(knem_rs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Attach `size` threads as one team over `transport` and run
/// `body(team, rank)` in each.
pub fn team_of(size: usize, transport: &'static CStr, body: fn(*mut CTeam, usize)) {
    let name = CString::new(knem_coll::team::create_fresh_block("knem-rs-test").unwrap()).unwrap();
    std::thread::scope(|s| {
        for rank in 0..size {
            let name = &name;
            s.spawn(move || {
                let mut team = null_mut();
                // SAFETY: valid strings and out pointer.
                let rc = unsafe {
                    knem_rs_team_attach(
                        name.as_ptr(),
                        rank as c_int,
                        size as c_int,
                        transport.as_ptr(),
                        &mut team,
                    )
                };
                assert_eq!(rc, 0, "attach: {}", last());
                body(team, rank);
                // SAFETY: attached above, closed once.
                unsafe { knem_rs_team_close(team) };
            });
        }
    });
    let _ = std::fs::remove_file(knem_coll::team::team_path(name.to_str().unwrap()));
}
