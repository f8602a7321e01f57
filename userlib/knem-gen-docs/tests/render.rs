//! The generated pages and completions, checked the way an administrator
//! meets them: `man -l` renders every page without a single warning from
//! groff (at 80 columns and at lintian's 120), lexgrog finds its NAME line,
//! and every flag that any `--help` of a tool shows (the tool's and each
//! of its subcommands') is documented in the rendered page (an entry of an
//! option list, not only a word of the synopsis); every completion
//! script names the tool and its flags.  Needs man-db (man, lexgrog).

use clap::Command;
use knem_gen_docs::{commands, completion_file, generate, SECTION, SHELLS};
use std::path::{Path, PathBuf};
use std::process::Command as Process;

/// A fresh output directory, removed at the end.
struct Out(PathBuf);

impl Out {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("knem-gen-docs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Out(d)
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `man ARGS PAGE` in lintian's environment: its stdout, stderr, status.
fn man(page: &Path, width: u32, args: &[&str]) -> (String, String, i32) {
    let out = Process::new("man")
        .args(args)
        .arg(page)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LC_ALL", "C.UTF-8")
        .env("MANROFFSEQ", "")
        .env("MANWIDTH", width.to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run man (apt-get install man-db): {e}"));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// The flags a help text lists: the leading `-x`, `--long` words of each
/// line that starts (after indentation) with `-`.
fn flags_of_help(help: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        if !t.starts_with('-') {
            continue;
        }
        for word in t.split_whitespace() {
            let w = word.trim_end_matches(',');
            if !w.starts_with('-') || w == "-" {
                break;
            }
            let w = w.split('=').next().unwrap_or(w);
            flags.push(w.to_string());
        }
    }
    flags
}

/// Every help text `--help` can print for `cmd`: its own and each
/// (non-hidden) subcommand's, with the subcommand's name.
fn helps(cmd: &Command) -> Vec<(String, String)> {
    let mut cmd = cmd.clone();
    cmd.build();
    let mut out = vec![(
        cmd.get_name().to_string(),
        cmd.clone().render_long_help().to_string(),
    )];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        out.push((
            format!("{} {}", cmd.get_name(), sub.get_name()),
            sub.clone().render_long_help().to_string(),
        ));
    }
    out
}

#[test]
fn every_page_renders_without_warnings_and_documents_every_flag() {
    let out = Out::new("man");
    generate(&out.0).unwrap();
    let tools = commands();
    assert_eq!(tools.len(), 4);
    for cmd in &tools {
        let name = cmd.get_name();
        let page = out.0.join(format!("man{SECTION}/{name}.{SECTION}"));
        for width in [80, 120] {
            let (_, err, status) = man(
                &page,
                width,
                &["--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z"],
            );
            assert_eq!(
                status,
                0,
                "man -l {}: status {status}: {err}",
                page.display()
            );
            assert_eq!(
                err,
                "",
                "man --warnings -l {} at {width} columns",
                page.display()
            );
        }
        let lex = Process::new("lexgrog")
            .arg(&page)
            .output()
            .expect("lexgrog (man-db)");
        let lex = String::from_utf8_lossy(&lex.stdout).into_owned();
        assert!(
            lex.contains(&format!(": \"{name} - ")),
            "lexgrog {}: {lex}",
            page.display()
        );
        // No hyphenation nor justification: each flag is one word.
        let (text, err, status) = man(&page, 200, &["--nh", "--nj", "-l"]);
        assert_eq!(status, 0, "{err}");
        // The flags the page documents: those its option lists start with
        // (a synopsis line does not count).
        let documented = flags_of_help(&text);
        let mut checked = 0;
        for (what, help) in helps(cmd) {
            let flags = flags_of_help(&help);
            assert!(
                flags.iter().any(|f| f == "--help"),
                "{what} --help lists no --help: the parser is wrong\n{help}"
            );
            for f in &flags {
                assert!(
                    documented.contains(f),
                    "{what}: {f} of --help is not an option documented in man {name}\n{text}"
                );
                checked += 1;
            }
            if what != name {
                assert!(
                    text.contains(&format!("\n   {what}\n")),
                    "no section for {what}\n{text}"
                );
            }
        }
        println!("man {name}: renders without warnings, {checked} flags of its --help texts in it");
    }
}

#[test]
fn completions_name_the_tool_and_its_flags() {
    let out = Out::new("completions");
    generate(&out.0).unwrap();
    for cmd in commands() {
        let name = cmd.get_name().to_string();
        let mut c = cmd.clone();
        c.build();
        let longs: Vec<String> = c
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| l.to_string())
            .collect();
        assert!(!longs.is_empty());
        for (shell, dir) in SHELLS {
            let path = out.0.join(dir).join(completion_file(shell, &name));
            let script = std::fs::read_to_string(&path).unwrap();
            let header = match dir {
                "bash" => format!("complete -F _{} ", name.replace('-', "__")),
                "zsh" => format!("#compdef {name}\n"),
                _ => format!("complete -c {name} "),
            };
            assert!(
                script.contains(&header),
                "{}: no '{header}'",
                path.display()
            );
            for l in &longs {
                assert!(script.contains(l.as_str()), "{}: no {l}", path.display());
            }
        }
        let bash = out.0.join("bash").join(&name);
        let st = Process::new("bash").arg("-n").arg(&bash).status().unwrap();
        assert!(st.success(), "bash -n {}", bash.display());
    }
}

#[test]
fn flag_parser_reads_clap_help() {
    let help = "Options:\n  -n, --np <N>  Number\n      --json\n  -h, --help  Print help\n  x -y\n";
    assert_eq!(
        flags_of_help(help),
        ["-n", "--np", "--json", "-h", "--help"]
    );
    // A synopsis line documents nothing.
    assert!(flags_of_help("       knem-run [-n|--np] [--transport]\n").is_empty());
}
