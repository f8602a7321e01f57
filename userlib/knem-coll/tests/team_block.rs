//! The control block in /dev/shm: made only by its creator, never another
//! user's file or a symbolic link put at its name, under a name nobody can
//! guess.  A team must refuse, and leave alone, whatever someone else
//! placed there: before, every rank opened the name with O_CREAT
//! (following symbolic links), truncated it to size and mapped it shared,
//! so another user could read and rewrite the team's descriptors, or have
//! the team truncate a file of the user's.

use knem_coll::team::{create_block, create_fresh_block, fresh_name, team_path};
use knem_coll::Team;
use knem_transport::Kind;
use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// uid and gid of nobody (Debian).
const NOBODY: u32 = 65534;

fn shm() -> Box<dyn knem_transport::Transport> {
    knem_transport::open(Kind::Shm).expect("shm transport")
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() == 0 }
}

/// A name of the old pattern's kind: one an attacker may plant ahead.
fn planted_name(what: &str) -> String {
    format!("knem-rs-test-planted-{what}-{}", std::process::id())
}

/// Remove whatever `p` is (a file or a symbolic link) at the end.
struct Cleanup(Vec<std::path::PathBuf>);
impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A file of `len` bytes of `fill` at `p`, mode `mode`, owned by `uid`.
fn plant_file(p: &Path, len: usize, fill: u8, mode: u32, uid: Option<u32>) {
    std::fs::write(p, vec![fill; len]).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    if let Some(uid) = uid {
        std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
    }
}

fn all_bytes(p: &Path, fill: u8, len: usize) -> bool {
    let d = std::fs::read(p).unwrap();
    d.len() == len && d.iter().all(|b| *b == fill)
}

/// Another user's file at the name (as root: nobody's, mode 0666, the
/// size of a control block, zeros as a fresh block has): the creator
/// refuses the name, every rank refuses to attach, and the file keeps
/// every byte.
#[test]
fn another_users_file_is_refused_and_left_alone() {
    let name = planted_name("file");
    let path = team_path(&name);
    let _c = Cleanup(vec![path.clone()]);
    // A genuine block's size: make one, measure it, remove it.
    let probe = create_fresh_block("knem-rs-test").unwrap();
    let len = std::fs::metadata(team_path(&probe)).unwrap().len() as usize;
    std::fs::remove_file(team_path(&probe)).unwrap();

    let uid = is_root().then_some(NOBODY);
    plant_file(&path, len, 0, 0o666, uid);
    let e = create_block(&name).expect_err("created over an existing file");
    assert!(e.to_string().contains("File exists"), "{e}");
    let r = Team::attach(&name, 0, 1, shm());
    assert!(all_bytes(&path, 0, len), "the planted file was written");
    let e = r.expect_err("attached to a planted file");
    let want = if is_root() {
        format!("owned by uid {NOBODY}, not 0")
    } else {
        "mode 0666, not 0600".to_string()
    };
    assert!(e.to_string().contains(&want), "{e}");
    let md = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (md.uid(), md.mode() & 0o777),
        (uid.unwrap_or(md.uid()), 0o666)
    );
}

/// A symbolic link at the name (as root: nobody's) to a file of this
/// user's: neither created through nor opened; the target keeps its size
/// and bytes (before, set_len truncated it to a control block).
#[test]
fn a_symlink_is_neither_followed_nor_truncated() {
    let name = planted_name("link");
    let path = team_path(&name);
    let target = team_path(&planted_name("target"));
    let _c = Cleanup(vec![path.clone(), target.clone()]);
    plant_file(&target, 100_000, 0x3c, 0o600, None);
    std::os::unix::fs::symlink(&target, &path).unwrap();
    if is_root() {
        std::os::unix::fs::lchown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let e = create_block(&name).expect_err("created through a symbolic link");
    assert!(e.to_string().contains("File exists"), "{e}");
    let r = Team::attach(&name, 0, 1, shm());
    assert!(
        all_bytes(&target, 0x3c, 100_000),
        "the link's target was changed"
    );
    let e = r.expect_err("attached through a symbolic link");
    // O_NOFOLLOW on a symbolic link: ELOOP.
    assert!(e.to_string().contains("symbolic links"), "{e}");
}

/// Files of this user's that a creator did not make: another mode,
/// another size, a second link.
#[test]
fn own_files_not_made_as_a_block_are_refused() {
    let good = create_fresh_block("knem-rs-test").unwrap();
    let gp = team_path(&good);
    let len = std::fs::metadata(&gp).unwrap().len() as usize;
    let (mode, size, link) = (
        team_path(&planted_name("mode")),
        team_path(&planted_name("size")),
        team_path(&planted_name("link2")),
    );
    let _c = Cleanup(vec![gp.clone(), mode.clone(), size.clone(), link.clone()]);
    assert_eq!(std::fs::metadata(&gp).unwrap().mode() & 0o7777, 0o600);
    plant_file(&mode, len, 0, 0o640, None);
    plant_file(&size, len + 4096, 0, 0o600, None);
    std::fs::hard_link(&gp, &link).unwrap();
    for (p, why) in [
        (&mode, "mode 0640, not 0600".to_string()),
        (&size, format!("{} bytes, not {len}", len + 4096)),
        (&link, "2 links, not 1".to_string()),
    ] {
        let n = p.file_name().unwrap().to_str().unwrap();
        let e = Team::attach(n, 0, 1, shm()).expect_err(n);
        assert!(e.to_string().contains(&why), "{n}: {e}");
    }
    // The block as made attaches (once the second link is gone).
    std::fs::remove_file(&link).unwrap();
    let t = Team::attach(&good, 0, 1, shm()).expect("a block made by create_block");
    assert_eq!(t.size(), 1);
}

/// Names: 128 random bits after the pid and a process-wide counter; many
/// threads naming teams at once never get one name twice.
#[test]
fn fresh_names_are_unguessable_and_distinct() {
    let names: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    (0..200)
                        .map(|_| fresh_name("x").unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let set: HashSet<&String> = names.iter().collect();
    assert_eq!(set.len(), 1600);
    let counters: HashSet<&str> = names.iter().map(|n| n.split('-').nth(2).unwrap()).collect();
    assert_eq!(counters.len(), 1600, "the counter repeated across threads");
    for n in &names {
        let parts: Vec<&str> = n.split('-').collect();
        assert_eq!(parts.len(), 4, "{n}");
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(
            parts[3].len() == 32 && parts[3].bytes().all(|b| b.is_ascii_hexdigit()),
            "{n}"
        );
    }
}
