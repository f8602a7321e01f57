//! The simulated DMA engine of the mock kernel.

use crate::edge::errno::{KResult, EIO, ENOMEM};
use crate::edge::shim::{DmaBatch, Env, PagePtr};
use crate::state::device::Device;
use crate::testing::mock::MockEnv;
use core::ffi::c_void;
use knem_abi::status;

/// A DMA engine for the host tests' mock: pieces are recorded at submission
/// and copied only when the batch ends (as an engine that runs late
/// would), every `fail_every`th piece fails without being copied.
#[derive(Default)]
pub struct MockDma {
    /// An engine is usable.
    pub on: core::sync::atomic::AtomicBool,
    /// `dma_min`.
    pub min: core::sync::atomic::AtomicU64,
    /// Fail every Nth piece (0: never).
    pub fail_every: core::sync::atomic::AtomicU64,
    /// The batch fails for good (EIO from `dma_copy`, as the shim's after
    /// a timed-out wait) once this many pieces were submitted (0: never).
    pub dead_after: core::sync::atomic::AtomicU64,
    /// Run a batch's pieces last to first (an engine whose order is not
    /// submission order).
    pub reverse: core::sync::atomic::AtomicBool,
    /// Pieces submitted so far.
    pub pieces: core::sync::atomic::AtomicU64,
    /// Batches begun and not ended.
    pub open: core::sync::atomic::AtomicI64,
    /// ASYNCDMACOMPLETE batches ended, not completed yet: (batch, slot,
    /// token, failed), completed by [`MockDma::complete_async`].
    pub inflight: std::sync::Mutex<std::vec::Vec<(usize, usize, usize, bool)>>,
}

type MockPiece = (PagePtr, u32, PagePtr, u32, u32, bool);

impl MockDma {
    /// [`Env::dma_usable`].
    pub fn usable(&self) -> bool {
        self.on.load(core::sync::atomic::Ordering::SeqCst)
    }

    /// [`Env::dma_begin`].
    pub fn begin(&self) -> Option<DmaBatch> {
        if !self.usable() {
            return None;
        }
        self.open.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
        let b: std::boxed::Box<std::vec::Vec<MockPiece>> = std::boxed::Box::default();
        Some(DmaBatch(std::boxed::Box::into_raw(b).cast()))
    }

    /// [`Env::dma_copy`]: records the piece, or EIO past `dead_after`.
    ///
    /// # Safety
    /// `b` comes from [`MockDma::begin`] and has not ended.
    pub unsafe fn copy(
        &self,
        b: DmaBatch,
        dst: PagePtr,
        dst_off: u32,
        src: PagePtr,
        src_off: u32,
        len: u32,
    ) -> KResult<()> {
        use core::sync::atomic::Ordering::SeqCst;
        let dead = self.dead_after.load(SeqCst);
        if dead != 0 && self.pieces.load(SeqCst) >= dead {
            return Err(EIO);
        }
        let n = self.pieces.fetch_add(1, SeqCst) + 1;
        let every = self.fail_every.load(SeqCst);
        let fail = every != 0 && n.is_multiple_of(every);
        // SAFETY: begin made b from a Box of this type; not ended (caller).
        let v = unsafe { &mut *b.0.cast::<std::vec::Vec<MockPiece>>() };
        v.push((dst, dst_off, src, src_off, len, fail));
        Ok(())
    }

    /// [`Env::dma_finish_async`]: the engine has not run yet.
    pub fn finish_async(&self, b: DmaBatch, slot: *mut u8, token: *mut c_void, failed: bool) {
        self.inflight
            .lock()
            .unwrap()
            .push((b.0 as usize, slot as usize, token as usize, failed));
    }

    /// The engine runs the oldest ASYNCDMACOMPLETE batch: copies, writes
    /// the slot, then the release runs (the shim's work item).  False when
    /// none is in flight.
    pub fn complete_async(&self, d: &Device<MockEnv>) -> bool {
        let next = {
            let mut v = self.inflight.lock().unwrap();
            (!v.is_empty()).then(|| v.remove(0))
        };
        let Some((b, slot, token, failed)) = next else {
            return false;
        };
        let ok = self.end(&d.env, DmaBatch(b as *mut c_void)).is_ok() && !failed;
        let st = if ok { status::SUCCESS } else { status::FAILED };
        // SAFETY: the slot of a live context's array (the test keeps it).
        unsafe { (slot as *mut u8).write_volatile(st) };
        // SAFETY: the token dma_submit gave, released once.
        unsafe { d.dma_release(token as *mut c_void, ok) };
        true
    }

    /// [`Env::dma_end`]: runs the recorded pieces.
    pub fn end<E: Env>(&self, env: &E, b: DmaBatch) -> KResult<()> {
        // SAFETY: begin made b from this Box type; it is ended once, here.
        let v = unsafe { std::boxed::Box::from_raw(b.0.cast::<std::vec::Vec<MockPiece>>()) };
        self.open.fetch_sub(1, core::sync::atomic::Ordering::SeqCst);
        let mut ok = true;
        let mut order: std::vec::Vec<&MockPiece> = v.iter().collect();
        if self.reverse.load(core::sync::atomic::Ordering::SeqCst) {
            order.reverse();
        }
        for &&(d, doff, s, soff, len, fail) in order.iter() {
            if fail {
                ok = false;
                continue;
            }
            // SAFETY: the pages are pinned until the batch ends (contract).
            unsafe { env.copy_page_page(d, doff, s, soff, len) };
        }
        if ok {
            Ok(())
        } else {
            Err(ENOMEM)
        }
    }
}
