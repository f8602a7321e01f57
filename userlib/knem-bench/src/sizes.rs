//! Message sizes: parsing `4K`, `64MiB`, ranges `1K..64M`, and printing them back.

use crate::err;
use crate::error::Result;

/// Parse one message size (`knem_coll::units::parse_size`: binary
/// suffixes, sums) of at least one byte.
pub fn parse_size(s: &str) -> Result<u64> {
    match knem_coll::units::parse_size(s) {
        Ok(0) => Err(err!("invalid size `{s}`: must be at least 1 byte")),
        Ok(n) => Ok(n),
        Err(e) => Err(err!("{e}")),
    }
}

/// Parse a size list: `4K,64K,1M` or a range `1K..64M` stepped by `factor`
/// (each size is the previous one times `factor`; the upper end is included
/// when it falls on the progression).
pub fn parse_size_list(spec: &str, factor: u64) -> Result<Vec<u64>> {
    if factor < 2 {
        return Err(err!("invalid size step {factor}: must be at least 2"));
    }
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((lo, hi)) = part.split_once("..") {
            let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
            if lo > hi {
                return Err(err!("invalid size range `{part}`: start is above end"));
            }
            let mut v = lo;
            while v <= hi {
                out.push(v);
                match v.checked_mul(factor) {
                    Some(n) => v = n,
                    None => break,
                }
            }
        } else {
            out.push(parse_size(part)?);
        }
    }
    if out.is_empty() {
        return Err(err!("empty size list `{spec}`"));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Print a size the short way round: `1K`, `64M`, `1536` (bytes when not a
/// whole number of KiB).
pub fn fmt_size(v: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (unit, name) in UNITS {
        if v >= unit && v % unit == 0 {
            return format!("{}{name}", v / unit);
        }
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_suffixed() {
        assert_eq!(parse_size("17").unwrap(), 17);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4kib").unwrap(), 4096);
        assert_eq!(parse_size(" 64MiB ").unwrap(), 64 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("8b").unwrap(), 8);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("17179869184G").is_err());
    }

    #[test]
    fn ranges_by_factor() {
        assert_eq!(
            parse_size_list("1K..64K", 4).unwrap(),
            vec![1024, 4096, 16384, 65536]
        );
        assert_eq!(
            parse_size_list("1K..4K", 2).unwrap(),
            vec![1024, 2048, 4096]
        );
        // the end is included only if it is on the progression
        assert_eq!(parse_size_list("1K..8K", 4).unwrap(), vec![1024, 4096]);
        assert_eq!(parse_size_list("64K, 4K,4K", 2).unwrap(), vec![4096, 65536]);
        assert!(parse_size_list("8K..1K", 2).is_err());
        assert!(parse_size_list("", 2).is_err());
        assert!(parse_size_list("1K..4K", 1).is_err());
    }

    #[test]
    fn formats_back() {
        assert_eq!(fmt_size(1024), "1K");
        assert_eq!(fmt_size(64 << 20), "64M");
        assert_eq!(fmt_size(1 << 30), "1G");
        assert_eq!(fmt_size(1536), "1536");
        assert_eq!(fmt_size(3), "3");
        for s in ["1K", "4M", "1G", "100"] {
            assert_eq!(fmt_size(parse_size(s).unwrap()), s);
        }
    }
}
