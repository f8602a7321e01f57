//! The transfer mechanisms compared, and whether each can run here.

use clap::ValueEnum;
use std::fmt;

/// A way of moving bytes from one process's buffer to another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Mech {
    /// `memcpy` inside one process: the ceiling.
    Memcpy,
    /// Double copy through two shared-memory chunk buffers, pipelined.
    Shm,
    /// `process_vm_readv` by the receiver.
    CmaRead,
    /// `process_vm_writev` by the sender.
    CmaWrite,
    /// KNEM inline copy, receiver reads the sender's region.
    KnemRead,
    /// KNEM inline copy, sender writes the receiver's region.
    KnemWrite,
    /// KNEM region-to-region copy by the receiver.
    KnemCopy,
    /// KNEM region-to-region copy on the module's offload thread
    /// (MEMCPYTHREAD), completion polled in the status array.
    KnemAsync,
    /// KNEM region-to-region copy by the receiver with `KNEM_FLAG_DMA`:
    /// offloaded to the module's DMA engine, waited for synchronously.
    KnemDma,
}

impl Mech {
    /// Every mechanism, in table order.
    pub const ALL: [Mech; 9] = [
        Mech::Memcpy,
        Mech::Shm,
        Mech::CmaRead,
        Mech::CmaWrite,
        Mech::KnemRead,
        Mech::KnemWrite,
        Mech::KnemCopy,
        Mech::KnemAsync,
        Mech::KnemDma,
    ];

    /// Name used in tables, CSV and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mech::Memcpy => "memcpy",
            Mech::Shm => "shm",
            Mech::CmaRead => "cma-read",
            Mech::CmaWrite => "cma-write",
            Mech::KnemRead => "knem-read",
            Mech::KnemWrite => "knem-write",
            Mech::KnemCopy => "knem-copy",
            Mech::KnemAsync => "knem-async",
            Mech::KnemDma => "knem-dma",
        }
    }

    /// Needs /dev/knem.
    pub fn is_knem(self) -> bool {
        matches!(
            self,
            Mech::KnemRead | Mech::KnemWrite | Mech::KnemCopy | Mech::KnemAsync | Mech::KnemDma
        )
    }

    /// Needs CMA between processes.
    pub fn is_cma(self) -> bool {
        matches!(self, Mech::CmaRead | Mech::CmaWrite)
    }

    /// The CMA mechanism this one is compared with in the `×CMA` column:
    /// writes with `cma-write`, everything else with `cma-read`.
    pub fn cma_reference(self) -> Mech {
        match self {
            Mech::CmaWrite | Mech::KnemWrite => Mech::CmaWrite,
            _ => Mech::CmaRead,
        }
    }

    /// The one-way transfer is pulled by the receiver (else pushed by the
    /// sender, or both take part for `shm`).
    pub fn pulls(self) -> bool {
        matches!(
            self,
            Mech::CmaRead | Mech::KnemRead | Mech::KnemCopy | Mech::KnemAsync | Mech::KnemDma
        )
    }
}

impl fmt::Display for Mech {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What this machine offers, probed once per run.
pub struct Probes {
    /// Why CMA is unusable, if it is.
    pub cma: Option<String>,
    /// Why /dev/knem is unusable, if it is.
    pub knem: Option<String>,
    /// Why the module's DMA engine is unusable, if it is.
    pub dma: Option<String>,
}

impl Probes {
    /// Probe only what `mechs` need.
    pub fn run(mechs: &[Mech]) -> Probes {
        Probes {
            cma: mechs
                .iter()
                .any(|m| m.is_cma())
                .then(crate::cma::unavailable_reason)
                .flatten(),
            knem: mechs
                .iter()
                .any(|m| m.is_knem())
                .then(crate::knemdev::unavailable_reason)
                .flatten(),
            dma: mechs
                .contains(&Mech::KnemDma)
                .then(crate::knemdev::dma_unavailable_reason)
                .flatten(),
        }
    }

    /// Why `m` cannot run here, if it cannot.
    pub fn skip_reason(&self, m: Mech) -> Option<String> {
        if m.is_cma() {
            return self.cma.clone();
        }
        if m == Mech::KnemDma && self.knem.is_none() {
            return self.dma.clone();
        }
        if m.is_knem() {
            return self.knem.clone();
        }
        None
    }

    /// Split `mechs` into those that run and `(mech, reason)` for the rest,
    /// printing one line per skipped mechanism on stderr.
    pub fn select(&self, mechs: &[Mech]) -> (Vec<Mech>, Vec<(Mech, String)>) {
        let mut run = Vec::new();
        let mut skipped = Vec::new();
        for &m in mechs {
            match self.skip_reason(m) {
                Some(why) => {
                    eprintln!("knem-bench: skipping {m}: {why}");
                    skipped.push((m, why));
                }
                None => run.push(m),
            }
        }
        (run, skipped)
    }
}
