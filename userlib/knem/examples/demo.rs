//! `make demo`: one process declares a region, another copies it with a
//! single KNEM copy and verifies every byte, then compares the module's
//! throughput with memcpy in the same machine.
//!
//! Run without arguments; the reader is this program started again as
//! `demo read COOKIE LEN SEED`.

use knem::{Cookie, Device, Region, RegionFlags, Status};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const LEN: usize = 16 << 20;
const REPS: usize = 5;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            // xorshift: every byte depends on the seed and its position.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn mib_per_s(len: usize, t: Duration) -> f64 {
    len as f64 / (1 << 20) as f64 / t.as_secs_f64()
}

/// The declaring process: a region over a pattern, handed to a reader.
fn declare() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let info = dev.info().map_err(|e| e.to_string())?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("knem-rs demo on Linux {}", kernel.trim());
    println!(
        "/dev/knem: ABI {:#04x}, features {:#x}, ignored flags {:#x}",
        info.abi, info.features, info.ignored_flags
    );

    let seed = std::process::id() as u64 * 0x9e37_79b9;
    let buf = pattern(LEN, seed);
    let region = Region::new(&dev, [&buf[..]], RegionFlags::NONE).map_err(|e| e.to_string())?;
    println!(
        "process {} declared a {} MiB region: cookie {}",
        std::process::id(),
        LEN >> 20,
        region.cookie()
    );

    let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let mut child = Command::new(exe)
        .args([
            "read",
            &region.cookie().as_raw().to_string(),
            &LEN.to_string(),
        ])
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the reader: {e}"))?;
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        println!("{}", line.map_err(|e| e.to_string())?);
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    drop(region);
    if status.success() {
        Ok(())
    } else {
        Err(format!("the reader failed ({status})"))
    }
}

/// The reading process: copies the region, verifies it, times it.
fn read(cookie: u64, len: usize, seed: u64) -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let cookie = Cookie::from_raw(cookie);
    let expect = pattern(len, seed);
    let mut out = vec![0u8; len];
    let mut knem = Vec::new();
    for _ in 0..REPS {
        out.fill(0);
        let t = Instant::now();
        let st = dev
            .read_into(cookie, 0, &mut out, None)
            .map_err(|e| e.to_string())?;
        knem.push(t.elapsed());
        if st != Status::Success {
            return Err(format!("INLINE_COPY ended {st:?}"));
        }
        if let Some(i) = out.iter().zip(&expect).position(|(a, b)| a != b) {
            return Err(format!(
                "byte {i} differs: {:#04x}, want {:#04x}",
                out[i], expect[i]
            ));
        }
    }
    println!(
        "process {} copied it with one KNEM inline copy: {} bytes verified",
        std::process::id(),
        len
    );

    let mut memcpy = Vec::new();
    for _ in 0..REPS {
        let t = Instant::now();
        out.copy_from_slice(std::hint::black_box(&expect));
        memcpy.push(t.elapsed());
        std::hint::black_box(&out);
    }
    let (k, m) = (median(knem), median(memcpy));
    println!(
        "module copy {:.0} MiB/s, memcpy {:.0} MiB/s in the same machine ({:.2}x of memcpy; median of {REPS})",
        mib_per_s(len, k),
        mib_per_s(len, m),
        m.as_secs_f64() / k.as_secs_f64()
    );
    std::io::stdout().flush().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        None => declare(),
        Some("read") if args.len() == 5 => {
            match (args[2].parse(), args[3].parse(), args[4].parse()) {
                (Ok(c), Ok(l), Ok(s)) => read(c, l, s),
                _ => Err("usage: demo read COOKIE LEN SEED".into()),
            }
        }
        _ => Err("usage: demo".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}
