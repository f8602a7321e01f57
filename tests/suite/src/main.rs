//! knem-tests: the in-VM integration suite of knem-rs.
//!
//! Runs every test in its own forked process (a crash, an abort or a hang
//! fails that test only), prints `ok NAME`, `FAIL NAME: REASON` or
//! `skip NAME: WHY` (a test that cannot run here, see `util::skip`) per
//! test and `N passed, N failed, N skipped` last; exits 1 if anything
//! failed, and with `--no-skip` a skip is a failure (but for the skip of
//! a part that needs a fault-injection build, when the module is not
//! one: `util::skip_fault`; and, with `--no-provider`, for the skip of a
//! test that needs the test DMA provider: `t_dma::PROVIDER_SKIP`).  When the
//! driver's sysfs counters exist, every test is also checked for leaks:
//! contexts, regions, pinned pages and the kernel's FOLL_PIN balance must
//! be back at their values from before the test.  A SUBSTRING that no
//! test's name contains is a failure (a renamed test must not vanish from
//! the runs that name it), and so is, with `--fault-build`, a loaded
//! module that is not a fault-injection build.
//!
//! Usage: `knem-tests [--list] [--mm] [--timeout SECS] [--no-skip]
//! [--allow-skip NAME]... [--no-provider] [--fault-build] [SUBSTRING...]`;
//! `--mm` runs the memory manager's movers (`MM_TESTS`) instead of the
//! suite; `--allow-skip` lets the test of that exact name skip under
//! `--no-skip` (one the booted kernel cannot run, named by the caller that
//! knows which kernel it booted).

mod stats;
mod t_async;
mod t_basic;
mod t_bounds;
mod t_consume;
mod t_copy;
mod t_dma;
mod t_dmafinish;
mod t_errors;
mod t_fidelity;
mod t_filepins;
mod t_harden;
mod t_inline;
mod t_legacy;
mod t_lifetime;
mod t_mm;
mod t_notify;
mod t_offload;
mod t_pincount;
mod t_pinpool;
mod t_security;
mod t_share;
mod t_status;
mod t_tablelock;
mod util;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, pipe, ForkResult};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use util::{fault_build, skip, TestResult, FAULT_SKIP, SKIP_PREFIX};

/// Exit status of a test process whose test was skipped.
const SKIP_EXIT: i32 = 77;

/// How a test that did not fail ended.
enum Outcome {
    Passed,
    /// The test's own message: `skipped: WHY`.
    Skipped(String),
}

/// A test: a name and a function.
type Test = (&'static str, fn() -> TestResult);

/// Every test, in the order they run.
#[rustfmt::skip]
const TESTS: &[Test] = &[
    ("get_info",                                t_basic::get_info),
    ("sysfs_counters_present",                  t_basic::sysfs_counters_present),
    ("rdonly_open_no_context",                  t_basic::rdonly_open_no_context),
    ("unknown_command_enotty",                  t_basic::unknown_command_enotty),
    ("cookie_nonzero_and_distinct",             t_basic::cookie_nonzero_and_distinct),
    ("inline_read_two_processes",               t_inline::read_two_processes),
    ("inline_write_two_processes",              t_inline::write_two_processes),
    ("ucx_probe_one_byte_stack",                t_inline::ucx_probe_one_byte_stack),
    ("inline_local_fault_is_failed",            t_inline::local_fault_is_failed),
    ("region_tracks_owner_writes",              t_inline::region_tracks_owner_writes),
    ("eacces_protection",                       t_errors::eacces_protection),
    ("einval_unknown_cookie",                   t_errors::einval_unknown_cookie),
    ("einval_destroyed_cookie",                 t_errors::einval_destroyed_cookie),
    ("einval_destroy_other_context",            t_errors::einval_destroy_other_context),
    ("efault_bad_pointers",                     t_errors::efault_bad_pointers),
    ("efault_unmapped_region",                  t_errors::efault_unmapped_region),
    ("efault_readonly_mapping_writable_region", t_errors::efault_readonly_mapping),
    ("flags_outside_mask_are_ignored",          t_fidelity::flags_outside_mask_are_ignored),
    ("single_use",                              t_errors::single_use),
    ("eperm_other_uid",                         t_errors::eperm_other_uid),
    ("access_checked_with_callers_uid_at_each_call", t_fidelity::access_checked_with_callers_uid_at_each_call),
    ("status_array_untouched_by_sync",          t_status::untouched_by_sync),
    ("status_array_second_mmap_fails",          t_status::second_mmap_fails),
    ("close_returns_counters_to_baseline",      t_lifetime::close_returns_to_baseline),
    ("multi_region_1000",                       t_lifetime::multi_region_1000),
    ("stats_error_counters",                    t_lifetime::stats_error_counters),
    ("stats_byte_counters",                     t_lifetime::stats_byte_counters),
    ("copy_region_to_region",                   t_copy::region_to_region),
    ("copy_eacces",                             t_copy::eacces),
    ("legacy_init_send_sync_recv",              t_legacy::init_send_sync_recv),
    // Issue 3: asynchronous copies, NOTIFY_FD, BIND_OFFLOAD, PINLOCAL.
    ("async_memcpythread_inline_read",          t_async::memcpythread_inline_read),
    ("async_memcpythread_inline_write",         t_async::memcpythread_inline_write),
    ("async_memcpythread_copy",                 t_async::memcpythread_copy),
    ("async_completion_order_ring_256",         t_async::completion_order_ring_256),
    ("async_dma_complete_without_dma",          t_async::asyncdmacomplete_without_dma),
    ("async_einval_rules",                      t_async::async_einval_rules),
    ("async_local_fault_no_crash",              t_async::async_local_fault_no_crash),
    ("async_close_with_pending_copies",         t_async::close_with_pending_async),
    ("pinlocal_sync_copy",                      t_async::pinlocal_sync_copy),
    ("legacy_init_async_recv",                  t_async::init_async_recv),
    ("bind_offload_rules",                      t_async::bind_offload_rules),
    ("stats_async_byte_counter",                t_async::stats_async_byte_counter),
    ("notify_fd_blocking_read",                 t_notify::notify_fd_blocking_read),
    ("notify_fd_blocking_read_fills_buffer",    t_fidelity::notify_fd_blocking_read_fills_buffer),
    ("notify_fd_nonblocking_eagain",            t_notify::notify_fd_nonblocking_eagain),
    ("notify_fd_poll_select",                   t_notify::notify_fd_poll_select),
    ("notify_fd_ebusy_at_queue_limit",          t_notify::notify_fd_ebusy_at_queue_limit),
    ("notify_fd_4_processes_1000_copies",       t_notify::notify_fd_4_processes_1000_copies),
    ("single_use_race_8_processes",             t_share::single_use_race_8_processes),
    ("any_user_access_other_uid_async",         t_share::any_user_access_other_uid),
    // Issue 7: the DMA engine (knem_dma_test.ko when the run adds it).
    ("dma_info_follows_engine",                 t_dma::info_follows_engine),
    ("dma_engine_matrix",                       t_dma::engine_matrix),
    ("dma_engine_failures",                     t_dma::engine_failures),
    ("dma_engine_asyncdmacomplete_order",       t_dma::engine_asyncdmacomplete_order),
    ("dma_engine_sigkill_in_flight",            t_dma::engine_sigkill_in_flight),
    ("dma_engine_provider_unload",              t_dma::engine_provider_unload),
    ("dma_timeout_isolated",                    t_dma::timeout_isolated),
    ("dma_timeout_isolated_on_close",           t_dma::timeout_isolated_on_close),
    ("fatal_signal_stops_long_dma_copy",        t_dma::fatal_signal_stops_long_dma_copy),
    ("dma_overlapping_destination",             t_dma::overlapping_destination),
    ("dma_async_batches_bounded",               t_dma::async_batches_bounded),
    ("dma_async_batches_charged",               t_dma::async_batches_charged),
    ("dma_async_pieces_bounded",                t_dma::async_pieces_bounded),
    ("dma_finish_async_abandoned_batch",        t_dmafinish::dma_finish_async_abandoned_batch),
    ("dma_abandoned_batches_bounded",           t_dma::abandoned_batches_bounded),
    // Issue 4: hardening.
    ("memlock_limit_enforced",                  t_harden::memlock_limit_enforced),
    ("memlock_refusals_counted",                t_harden::memlock_refusals_counted),
    ("memlock_cap_ipc_lock_bypasses",           t_harden::memlock_cap_ipc_lock_bypasses),
    ("memlock_account_pinned_off",              t_harden::memlock_account_pinned_off),
    ("cookie_guessing_misses",                  t_harden::cookie_guessing_misses),
    ("cookie_tag_bits_random",                  t_harden::cookie_tag_bits_random),
    ("access_policy_uid",                       t_harden::access_policy_uid),
    ("access_policy_ptrace",                    t_harden::access_policy_ptrace),
    ("access_policy_ptrace_yama",               t_harden::access_policy_ptrace_yama),
    ("ptrace_owner_leader_exited",              t_harden::ptrace_owner_leader_exited),
    ("fork_child_cannot_touch_parent_regions",  t_harden::fork_child_cannot_touch_parent_regions),
    ("fork_child_has_no_status_array",          t_harden::fork_child_has_no_status_array),
    ("sigkill_owner_under_4_readers",           t_harden::sigkill_owner_under_4_readers),
    ("close_racing_copies_threads",             t_harden::close_racing_copies_threads),
    ("charge_returns_to_the_owner",             t_harden::charge_returns_to_the_owner),
    ("unload_refused_while_open",               t_harden::unload_refused_while_open),
    // Bounds on one user's kernel resources.
    ("regions_per_user_bounded",                t_bounds::regions_per_user_bounded),
    ("status_array_map_shared_only",            t_bounds::status_array_map_shared_only),
    ("status_array_in_memory_cgroup",           t_offload::status_array_in_memory_cgroup),
    ("status_array_charged_to_memlock_without_memcg", t_status::status_array_charged_to_memlock_without_memcg),
    ("status_array_not_inherited_after_dofork", t_bounds::status_array_not_inherited_after_dofork),
    ("fatal_signal_stops_long_copy",            t_bounds::fatal_signal_stops_long_copy),
    ("fatal_signal_stops_long_async_copy",      t_bounds::fatal_signal_stops_long_async_copy),
    ("page_refcount_pins_bounded",              t_bounds::page_refcount_pins_bounded),
    ("file_backed_write_pins_refused",          t_filepins::file_backed_write_pins_refused),
    ("file_write_pin_races_mmap",               t_filepins::file_write_pin_races_mmap),
    ("offload_threads_bounded",                 t_offload::offload_threads_bounded),
    ("offload_thread_in_callers_cpuset",        t_offload::offload_thread_in_callers_cpuset),
    ("offload_thread_cpus_kept_across_hotplug", t_offload::offload_thread_cpus_kept_across_hotplug),
    // Issue 21: security III.
    ("account_bounds_across_userns_uids",       t_security::account_bounds_across_userns_uids),
    ("memlock_per_user_across_exec",            t_security::memlock_per_user_across_exec),
    ("memlock_cap_ipc_lock_only_in_initial_userns", t_security::memlock_cap_ipc_lock_only_in_initial_userns),
    ("root_namespaces_have_their_own_bounds",   t_security::root_namespaces_have_their_own_bounds),
    ("memlock_shared_by_subordinate_uids",      t_security::memlock_shared_by_subordinate_uids),
    ("empty_iovecs_hold_no_kernel_memory",      t_security::empty_iovecs_hold_no_kernel_memory),
    ("per_open_memory_charged_to_memcg",        t_security::per_open_memory_charged_to_memcg),
    ("pin_count_refused_before_overflow",       t_pincount::pin_count_refused_before_overflow),
    ("pin_pool_not_held_by_stalled_gup",        t_pinpool::pin_pool_not_held_by_stalled_gup),
    ("no_long_scans_under_table_mutex",         t_tablelock::no_long_scans_under_table_mutex),
    // Issue 33: security IV.
    ("single_use_consumed_while_owner_closes",  t_consume::single_use_consumed_while_owner_closes),
];

/// The memory manager's movers against live regions (issue 35), run only
/// with `--mm`: they want a guest booted for them (two fake NUMA nodes, a
/// scratch ext4 for a swap file: tests/vm/mm-suite.sh) and change
/// node-wide settings (THP, KSM, swap) while they run.
#[rustfmt::skip]
const MM_TESTS: &[Test] = &[
    ("mm_migration_and_compaction_under_copies", t_mm::migration_and_compaction_under_copies),
    ("mm_thp_collapse_and_split_under_copies",   t_mm::thp_collapse_and_split_under_copies),
    ("mm_ksm_merged_pages_under_copies",         t_mm::ksm_merged_pages_under_copies),
    ("mm_fork_keeps_regions_with_parent",        t_mm::fork_keeps_regions_with_parent),
    ("mm_swap_under_copies",                     t_mm::swap_under_copies),
    ("mm_oom_kill_of_region_owner",              t_mm::oom_kill_of_region_owner),
];

/// Longest message passed back from a test process.
const MAX_MSG: usize = 2000;

fn main() {
    // An image of memlock_per_user_across_exec, not the suite.
    if let Ok(spec) = std::env::var(t_security::EXEC_ENV) {
        std::process::exit(t_security::exec_round(&spec));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut timeout = Duration::from_secs(300);
    let mut no_skip = false;
    let mut no_provider = false;
    let mut want_fault_build = false;
    let mut list = false;
    let mut allowed_skips: Vec<String> = Vec::new();
    let mut tests = TESTS;
    let mut filters = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => list = true,
            "--mm" => tests = MM_TESTS,
            "--allow-skip" => match it.next() {
                Some(name) => allowed_skips.push(name.clone()),
                None => {
                    eprintln!("knem-tests: --allow-skip needs a test name");
                    std::process::exit(2);
                }
            },
            "--no-skip" => no_skip = true,
            "--no-provider" => no_provider = true,
            "--fault-build" => want_fault_build = true,
            "--timeout" => {
                let secs = it.next().and_then(|s| s.parse().ok()).unwrap_or(300);
                timeout = Duration::from_secs(secs);
            }
            _ => filters.push(a.clone()),
        }
    }

    if list {
        for (name, _) in tests {
            println!("{name}");
        }
        return;
    }

    let (mut passed, mut failed, mut skipped) = (0u32, 0u32, 0u32);
    // Every filter must select something: one that matches no test (a
    // renamed test, a typo) would run nothing and pass.
    for p in &filters {
        if !tests.iter().any(|(name, _)| name.contains(p.as_str())) {
            failed += 1;
            println!("FAIL filter {p}: no test's name contains it (see --list)");
        }
    }
    // So must every name --allow-skip gives: it would excuse nothing.
    for a in &allowed_skips {
        if !tests.iter().any(|(name, _)| name == a) {
            failed += 1;
            println!("FAIL allow-skip {a}: no test has that name (see --list)");
        }
    }
    // Without the device nothing else can say anything useful.
    if let Err(e) = knem::Device::open() {
        println!("FAIL device: {e}");
        println!("0 passed, {} failed, 0 skipped", failed + 1);
        std::process::exit(1);
    }
    if want_fault_build && !fault_build() {
        failed += 1;
        println!(
            "FAIL fault-build: the loaded knem has no fault_* parameter: not a fault-injection build (KNEM_FAULT_INJECT=1)"
        );
    }
    let leak_check = stats::counters_available();
    if !leak_check {
        eprintln!(
            "note: {} has no counters; per-test leak checks are off",
            stats::SYSFS_DIR
        );
    }

    for (name, f) in tests {
        if !filters.is_empty() && !filters.iter().any(|p| name.contains(p.as_str())) {
            continue;
        }
        let r = run_isolated(*f, timeout, leak_check);
        match r {
            Ok(Outcome::Passed) => {
                passed += 1;
                println!("ok {name}");
            }
            Ok(Outcome::Skipped(msg))
                if no_skip
                    && !excused(&msg, no_provider)
                    && !allowed_skips.iter().any(|a| a == name) =>
            {
                failed += 1;
                println!("FAIL {name}: {} (--no-skip)", one_line(&msg));
            }
            Ok(Outcome::Skipped(msg)) => {
                skipped += 1;
                let why = msg.strip_prefix(SKIP_PREFIX).unwrap_or(&msg);
                println!("skip {name}: {}", one_line(why));
            }
            Err(msg) => {
                failed += 1;
                println!("FAIL {name}: {}", one_line(&msg));
            }
        }
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

/// Whether `--no-skip` lets this skip stay a skip: the fault-only part of
/// a test on a module that is not a fault-injection build, and with
/// `--no-provider` (a run without the test DMA provider on purpose, whose
/// tests another run covers) a test that needs the provider.
fn excused(msg: &str, no_provider: bool) -> bool {
    (!fault_build() && msg.starts_with(&skip(FAULT_SKIP)))
        || (no_provider && msg == skip(t_dma::PROVIDER_SKIP))
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Run `f` in a child process, with a deadline, then check for leaks
/// (after a skip too: a test may give up half-way).
fn run_isolated(
    f: fn() -> TestResult,
    timeout: Duration,
    leak_check: bool,
) -> Result<Outcome, String> {
    let base = if leak_check {
        Some(stats::Snapshot::take().map_err(|e| format!("baseline: {e}"))?)
    } else {
        None
    };
    let (rx, tx) = pipe().map_err(|e| format!("pipe: {e}"))?;
    let _ = std::io::stdout().flush();
    // SAFETY: the harness is single-threaded; the child runs one test and
    // leaves with _exit.
    let child = match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            drop(rx);
            let r = f();
            let (code, msg) = match r {
                Ok(()) => (0, String::new()),
                Err(m) if m.starts_with(SKIP_PREFIX) => (SKIP_EXIT, m),
                Err(m) => (1, m),
            };
            let mut end = msg.len().min(MAX_MSG);
            while !msg.is_char_boundary(end) {
                end -= 1;
            }
            let _ = File::from(tx).write_all(&msg.as_bytes()[..end]);
            // SAFETY: leave without unwinding into the harness.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => child,
    };
    drop(tx);
    // Peers of the test may hold the pipe open; poll the child, not EOF.
    // SAFETY: plain fcntl on our own fd.
    unsafe { nix::libc::fcntl(rx.as_raw_fd(), nix::libc::F_SETFL, nix::libc::O_NONBLOCK) };
    let mut rx = File::from(rx);
    let start = Instant::now();
    let mut msg = Vec::new();
    let status = loop {
        let mut buf = [0u8; 512];
        while let Ok(n) = rx.read(&mut buf) {
            if n == 0 {
                break;
            }
            msg.extend_from_slice(&buf[..n]);
        }
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(st) => break st,
            Err(e) => return Err(format!("waitpid: {e}")),
        }
        if start.elapsed() > timeout {
            let _ = kill(child, Signal::SIGKILL);
            let _ = waitpid(child, None);
            return Err(format!("timed out after {} s", timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut buf = [0u8; 512];
    while let Ok(n) = rx.read(&mut buf) {
        if n == 0 {
            break;
        }
        msg.extend_from_slice(&buf[..n]);
    }
    let msg = String::from_utf8_lossy(&msg).into_owned();
    let outcome = match status {
        WaitStatus::Exited(_, 0) => Outcome::Passed,
        WaitStatus::Exited(_, SKIP_EXIT) if msg.starts_with(SKIP_PREFIX) => Outcome::Skipped(msg),
        WaitStatus::Exited(_, _) => return Err(msg),
        WaitStatus::Signaled(_, sig, _) => return Err(format!("killed by {sig:?} {msg}")),
        other => return Err(format!("unexpected wait status {other:?}")),
    };
    if let Some(base) = base {
        stats::wait_for(&base, "not back to baseline after the test")?;
    }
    Ok(outcome)
}
