//! knem_rs_team_create, _create_named, _unlink and _attach's refusals
//! through the C entry points: a fresh name fits the buffer or -ERANGE
//! (and nothing stays behind), an existing name or a symbolic link is
//! -EEXIST for the creator, and _attach refuses a symbolic link (-ELOOP)
//! and a file not as made (-EPERM) without writing to either.

use knem_rs::*;
use libc::c_char;
use std::ffi::{CStr, CString};
use std::ptr::null_mut;

fn last() -> String {
    // SAFETY: the API returns a valid C string.
    unsafe { CStr::from_ptr(knem_rs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn attach(name: &CStr) -> i32 {
    let mut team = null_mut();
    // SAFETY: valid strings and out pointer.
    let rc = unsafe { knem_rs_team_attach(name.as_ptr(), 0, 1, c"shm".as_ptr(), &mut team) };
    if rc == 0 {
        // SAFETY: attached above, closed once.
        unsafe { knem_rs_team_close(team) };
    }
    rc
}

#[test]
fn create_attach_unlink_and_refusals() {
    // A fresh name: too small a buffer is -ERANGE and leaves no block.
    let mut small = [0 as c_char; 16];
    // SAFETY: a writable buffer of the size passed.
    let rc = unsafe { knem_rs_team_create(c"capi-test".as_ptr(), small.as_mut_ptr(), 16) };
    assert_eq!(rc, -libc::ERANGE, "{}", last());
    let pid = std::process::id();
    let left = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("capi-test-{pid}-"))
        })
        .count();
    assert_eq!(left, 0, "a block made for a short buffer stayed");

    let mut buf = [0 as c_char; 128];
    // SAFETY: as above.
    let rc = unsafe { knem_rs_team_create(c"capi-test".as_ptr(), buf.as_mut_ptr(), buf.len()) };
    assert_eq!(rc, 0, "{}", last());
    // SAFETY: NUL-terminated by the call.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_owned();
    assert!(name
        .to_str()
        .unwrap()
        .starts_with(&format!("capi-test-{pid}-")));
    assert_eq!(attach(&name), 0, "{}", last());
    // SAFETY: a valid string.
    assert_eq!(
        unsafe { knem_rs_team_create_named(name.as_ptr()) },
        -libc::EEXIST
    );
    // SAFETY: as above.
    assert_eq!(
        unsafe { knem_rs_team_unlink(name.as_ptr()) },
        0,
        "{}",
        last()
    );
    // SAFETY: as above.
    assert_eq!(unsafe { knem_rs_team_unlink(name.as_ptr()) }, -libc::ENOENT);
    // Attach never creates.
    assert_eq!(attach(&name), -libc::ENOENT);

    // A symbolic link and a file of another mode at names of our own.
    let link = CString::new(format!("capi-test-link-{pid}")).unwrap();
    let file = CString::new(format!("capi-test-file-{pid}")).unwrap();
    let target = format!("/dev/shm/capi-test-target-{pid}");
    std::fs::write(&target, [7u8; 5000]).unwrap();
    let lpath = format!("/dev/shm/{}", link.to_str().unwrap());
    let fpath = format!("/dev/shm/{}", file.to_str().unwrap());
    std::os::unix::fs::symlink(&target, &lpath).unwrap();
    std::fs::write(&fpath, []).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fpath, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    // SAFETY: valid strings.
    let (cl, cf) = unsafe {
        (
            knem_rs_team_create_named(link.as_ptr()),
            knem_rs_team_create_named(file.as_ptr()),
        )
    };
    let (al, af) = (attach(&link), attach(&file));
    let target_kept = std::fs::read(&target).unwrap() == [7u8; 5000];
    let file_len = std::fs::metadata(&fpath).unwrap().len();
    for p in [&lpath, &fpath, &target] {
        let _ = std::fs::remove_file(p);
    }
    assert_eq!((cl, cf), (-libc::EEXIST, -libc::EEXIST));
    assert_eq!((al, af), (-libc::ELOOP, -libc::EPERM));
    assert!(target_kept, "the link's target was written");
    assert_eq!(file_len, 0, "the planted file was written");
}
