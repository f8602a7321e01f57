//! The model file's JSON: an object of [`Params`] by transport name.
//!
//! Read by every team at start-up, so the library carries its own small
//! reader and writer for this one shape instead of a serialisation
//! framework (the C library links no tooling crates).

use crate::model::Params;
use std::collections::BTreeMap;

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    List(Vec<Value>),
    Object(Vec<(String, Value)>),
}

struct Reader<'a> {
    text: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn fail<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at byte {}", self.at))
    }

    fn skip_space(&mut self) {
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.skip_space();
        if self.text.get(self.at) == Some(&b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.eat(b) {
            Ok(())
        } else {
            self.fail(&format!("expected '{}'", b as char))
        }
    }

    fn value(&mut self) -> Result<Value, String> {
        self.skip_space();
        match self.text.get(self.at) {
            Some(b'{') => {
                self.at += 1;
                let mut fields = Vec::new();
                if self.eat(b'}') {
                    return Ok(Value::Object(fields));
                }
                loop {
                    self.skip_space();
                    let key = self.string()?;
                    self.expect(b':')?;
                    fields.push((key, self.value()?));
                    if self.eat(b'}') {
                        return Ok(Value::Object(fields));
                    }
                    self.expect(b',')?;
                }
            }
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return Ok(Value::List(items));
                }
                loop {
                    items.push(self.value()?);
                    if self.eat(b']') {
                        return Ok(Value::List(items));
                    }
                    self.expect(b',')?;
                }
            }
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(_) => self.word(),
            None => self.fail("unexpected end"),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        if self.text.get(self.at) != Some(&b'"') {
            return self.fail("expected a string");
        }
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.text.get(self.at) else {
                return self.fail("unterminated string");
            };
            self.at += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.text.get(self.at) else {
                        return self.fail("unterminated escape");
                    };
                    self.at += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let hex = self.text.get(self.at..self.at + 4);
                            let code = hex
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .and_then(char::from_u32);
                            let Some(c) = code else {
                                return self.fail("bad \\u escape");
                            };
                            self.at += 4;
                            let mut buf = [0; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return self.fail("bad escape"),
                    }
                }
                _ => out.push(b),
            }
        }
        String::from_utf8(out).or_else(|_| self.fail("string is not UTF-8"))
    }

    fn word(&mut self) -> Result<Value, String> {
        let start = self.at;
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b))
        {
            self.at += 1;
        }
        let word = std::str::from_utf8(&self.text[start..self.at]).unwrap_or("");
        match word {
            "null" => Ok(Value::Null),
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => match word.parse::<f64>() {
                Ok(n) if !word.is_empty() && !word.starts_with(['+', '.', 'i', 'I', 'n', 'N']) => {
                    Ok(Value::Num(n))
                }
                _ => {
                    self.at = start;
                    self.fail("expected a value")
                }
            },
        }
    }
}

fn parse(text: &str) -> Result<Value, String> {
    let mut r = Reader {
        text: text.as_bytes(),
        at: 0,
    };
    let v = r.value()?;
    r.skip_space();
    if r.at != r.text.len() {
        return r.fail("trailing characters");
    }
    Ok(v)
}

fn field<'a>(fields: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn number(fields: &[(String, Value)], name: &str, default: Option<f64>) -> Result<f64, String> {
    match (field(fields, name), default) {
        (Some(Value::Num(n)), _) => Ok(*n),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(format!("missing field `{name}`")),
        (Some(_), _) => Err(format!("field `{name}`: not a number")),
    }
}

fn whole(fields: &[(String, Value)], name: &str, default: Option<u64>) -> Result<u64, String> {
    let n = number(fields, name, default.map(|d| d as f64))?;
    if n < 0.0 || n.fract() != 0.0 || n > u64::MAX as f64 {
        return Err(format!("field `{name}`: not a whole number"));
    }
    Ok(n as u64)
}

fn points(fields: &[(String, Value)], name: &str) -> Result<Vec<(usize, f64)>, String> {
    let Some(v) = field(fields, name) else {
        return Ok(Vec::new());
    };
    let bad = || format!("field `{name}`: not a list of [count, value] pairs");
    let Value::List(items) = v else {
        return Err(bad());
    };
    items
        .iter()
        .map(|p| match p {
            Value::List(pair) => match pair.as_slice() {
                [Value::Num(c), Value::Num(x)] if *c >= 0.0 && c.fract() == 0.0 => {
                    Ok((*c as usize, *x))
                }
                _ => Err(bad()),
            },
            _ => Err(bad()),
        })
        .collect()
}

fn params_of(v: &Value) -> Result<Params, String> {
    let Value::Object(f) = v else {
        return Err("parameters are not an object".into());
    };
    let source = match field(f, "source") {
        Some(Value::Str(s)) => s.clone(),
        Some(_) => return Err("field `source`: not a string".into()),
        None => return Err("missing field `source`".into()),
    };
    Ok(Params {
        source,
        alpha: number(f, "alpha", None)?,
        beta: number(f, "beta", None)?,
        l: number(f, "l", None)?,
        page: whole(f, "page", None)?,
        gamma_a: number(f, "gamma_a", None)?,
        gamma_b: number(f, "gamma_b", None)?,
        sync: number(f, "sync", None)?,
        signal: number(f, "signal", None)?,
        gamma_points: points(f, "gamma_points")?,
        bw_par: number(f, "bw_par", Some(1.0))?,
        oversub: number(f, "oversub", Some(0.0))?,
        cache: whole(f, "cache", Some(0))?,
        step_points: points(f, "step_points")?,
        cpus: 0,
    })
}

/// Parses a model file: an object of parameters by transport name.
pub fn read(text: &str) -> Result<BTreeMap<String, Params>, String> {
    let Value::Object(kinds) = parse(text)? else {
        return Err("the model file is not an object".into());
    };
    kinds
        .iter()
        .map(|(k, v)| Ok((k.clone(), params_of(v).map_err(|e| format!("{k}: {e}"))?)))
        .collect()
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as JSON: the shortest text that reads back the same value
/// (non-finite values, which JSON cannot hold, as null).
fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:?}")
    } else {
        "null".into()
    }
}

fn pairs(p: &[(usize, f64)]) -> String {
    let items: Vec<String> = p
        .iter()
        .map(|(c, x)| format!("[{c}, {}]", num(*x)))
        .collect();
    format!("[{}]", items.join(", "))
}

/// Writes a model file that [`read`] gives back unchanged (but for the
/// host's `cpus`, which is never stored).
pub fn write(all: &BTreeMap<String, Params>) -> String {
    let mut out = String::from("{\n");
    for (i, (kind, p)) in all.iter().enumerate() {
        let fields = [
            ("source", quote(&p.source)),
            ("alpha", num(p.alpha)),
            ("beta", num(p.beta)),
            ("l", num(p.l)),
            ("page", p.page.to_string()),
            ("gamma_a", num(p.gamma_a)),
            ("gamma_b", num(p.gamma_b)),
            ("sync", num(p.sync)),
            ("signal", num(p.signal)),
            ("gamma_points", pairs(&p.gamma_points)),
            ("bw_par", num(p.bw_par)),
            ("oversub", num(p.oversub)),
            ("cache", p.cache.to_string()),
            ("step_points", pairs(&p.step_points)),
        ];
        let body: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("    {}: {v}", quote(k)))
            .collect();
        out += &format!("  {}: {{\n{}\n  }}", quote(kind), body.join(",\n"));
        out += if i + 1 < all.len() { ",\n" } else { "\n" };
    }
    out + "}\n"
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
