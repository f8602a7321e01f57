//! The model file's JSON: an object of [`Params`] by transport name, read
//! and written with serde_json.  Fields added since the first calibrations
//! take their defaults when a file lacks them, so older files still load.

use crate::model::Params;
use std::collections::BTreeMap;

/// Parses a model file: an object of parameters by transport name.
pub fn read(text: &str) -> Result<BTreeMap<String, Params>, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Writes a model file that [`read`] gives back unchanged (but for the
/// host's `cpus`, which is never stored).
pub fn write(all: &BTreeMap<String, Params>) -> String {
    // Params holds only strings, numbers and lists: this cannot fail.
    serde_json::to_string_pretty(all).expect("model parameters serialise") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Params {
        Params {
            source: "calibrated on \"host\"\n".into(),
            gamma_points: vec![(2, 1.25), (4, 1.0 / 3.0)],
            step_points: vec![(8, 7.5e-9)],
            cache: 1 << 20,
            bw_par: 0.4,
            ..Params::default()
        }
    }

    #[test]
    fn a_file_that_is_no_model_is_named_and_never_replaced() {
        use crate::model::{load_first_noting, store};
        use knem_transport::Kind;
        let path = std::env::temp_dir().join(format!("knem-rs-not-a-model-{}", std::process::id()));
        std::fs::write(&path, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
        let err = store(&path, Kind::Cma, &sample()).unwrap_err().to_string();
        assert!(err.contains("not a knem-rs model file"), "{err}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "root:x:0:0:root:/root:/bin/bash\n");
        let mut notes = Vec::new();
        let missing = path.with_extension("missing");
        let found = load_first_noting(&[missing, path.clone()], Kind::Cma, |l| notes.push(l));
        assert!(found.is_none());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with(&format!(
                "passed over {}: not a knem-rs model file",
                path.display()
            )),
            "{notes:?}"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn writes_what_it_reads() {
        let mut all = BTreeMap::new();
        all.insert("knem".to_string(), sample());
        all.insert("cma".to_string(), Params::default());
        assert_eq!(read(&write(&all)).unwrap(), all);
    }

    #[test]
    fn missing_optional_fields_take_their_defaults() {
        let text = r#"{"shm": {"source": "x", "alpha": 1e-6, "beta": 2E-10, "l": 0,
            "page": 4096, "gamma_a": 0.5, "gamma_b": -0.25, "sync": 1, "signal": 3}}"#;
        let p = &read(text).unwrap()["shm"];
        assert_eq!(
            (p.alpha, p.beta, p.page, p.gamma_b),
            (1e-6, 2e-10, 4096, -0.25)
        );
        assert_eq!((p.bw_par, p.oversub, p.cache), (1.0, 0.0, 0));
        assert!(p.gamma_points.is_empty() && p.step_points.is_empty());
    }

    #[test]
    fn the_shared_xeon16_model_loads() {
        let text = include_str!("../tests/data/xeon16/model16.json");
        let p = &read(text).unwrap()["cma"];
        assert_eq!(p.page, 4096);
        assert_eq!(p.alpha, 7.24e-7);
        assert_eq!(p.gamma_points.len(), 15);
        assert_eq!(p.step_points[14], (15, 1.9579284522528975));
    }

    #[test]
    fn the_user_model_comes_before_the_system_one() {
        use crate::model::{load_first, store};
        use knem_transport::Kind;
        let dir = std::env::temp_dir().join(format!("knem-rs-model-{}", std::process::id()));
        let (user, system) = (dir.join("user.json"), dir.join("system.json"));
        let paths = [user.clone(), system.clone()];
        let named = |s: &str| Params {
            source: s.into(),
            ..Params::default()
        };
        assert!(load_first(&paths, Kind::Cma).is_none());
        store(&system, Kind::Cma, &named("node")).unwrap();
        store(&system, Kind::Shm, &named("node shm")).unwrap();
        let (p, from) = load_first(&paths, Kind::Cma).unwrap();
        assert_eq!((p.source.as_str(), &from), ("node", &system));
        store(&user, Kind::Cma, &named("mine")).unwrap();
        assert_eq!(load_first(&paths, Kind::Cma).unwrap().0.source, "mine");
        // A transport the user did not calibrate: the node's.
        assert_eq!(load_first(&paths, Kind::Shm).unwrap().0.source, "node shm");
        // A broken user file is passed over.
        std::fs::write(&user, "{").unwrap();
        assert_eq!(load_first(&paths, Kind::Cma).unwrap().0.source, "node");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_files_are_refused() {
        for bad in [
            "",
            "[]",
            r#"{"knem": {"source": "x"}}"#,
            r#"{"knem": 1}"#,
            r#"{"knem": {"source": "x", "alpha": "1"}}"#,
            r#"{"a": {}} trailing"#,
            r#"{"a": {"source": "x", "alpha": 1, "beta": 1, "l": 1, "page": 1.5,
                "gamma_a": 1, "gamma_b": 1, "sync": 1, "signal": 1}}"#,
            r#"{"a": {"source": "unterminated}}"#,
        ] {
            assert!(read(bad).is_err(), "accepted {bad:?}");
        }
    }
}
