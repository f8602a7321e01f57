//! The man pages and shell completions of the tools that knem-rs-tools
//! ships (knem-stat, knem-bench, knem-run, knem-coll), generated from the
//! clap definitions the programs themselves parse with: nothing about a
//! command line is written twice.
//!
//! `generate(OUT)` writes
//!
//! - `OUT/man1/TOOL.1`: one page per tool, roff from clap_mangen's
//!   sections; a tool with subcommands gets a COMMANDS section with each
//!   subcommand's synopsis, description and options (the options that
//!   every subcommand takes are under OPTIONS once), so that `man TOOL`
//!   documents every flag that any `--help` of the tool shows;
//! - `OUT/bash/TOOL`, `OUT/zsh/_TOOL`, `OUT/fish/TOOL.fish`: clap_complete's
//!   completions, named as bash-completion, zsh and fish look them up.
//!
//! The Makefile's `tools-bin` runs it into build/prebuilt/doc, which the
//! packages install (`make install-tools`).

use clap::{Command, CommandFactory};
use clap_complete::Shell;
use clap_mangen::roff::{roman, Roff};
use clap_mangen::Man;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Section of every page: user commands (the counters knem-stat reads are
/// readable by every user, or by the group knem).
pub const SECTION: &str = "1";

/// The date of the pages, YYYY-MM-DD: that of SOURCE_DATE_EPOCH (the
/// Makefile sets it to the last commit's), so that a rebuild gives the
/// same bytes; today's without it.  (`.TH` needs a date: an empty one
/// would shift the source and manual names into its place.)
pub fn page_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Year, month, day of a count of days since 1970-01-01 (proleptic
/// Gregorian calendar; H. Hinnant's days-to-civil algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The command line of every shipped tool, as its program builds it.
pub fn commands() -> Vec<Command> {
    vec![
        knem_stat::Cli::command(),
        knem_bench::Cli::command(),
        knem_coll::cli::run::Cli::command(),
        knem_coll::cli::coll::Cli::command(),
    ]
}

/// `cmd` ready for rendering: built (global options propagated, names of
/// subcommands set), without clap's `help` subcommand (not a command of
/// the tool, and `--help` is documented), the subcommands headed COMMANDS.
fn prepared(cmd: Command) -> Command {
    let mut cmd = cmd.disable_help_subcommand(true);
    if cmd.has_subcommands() {
        cmd = cmd
            .subcommand_value_name("COMMAND")
            .subcommand_help_heading("COMMANDS");
    }
    cmd.build();
    cmd
}

/// Roff of one clap_mangen section without its `.SH` heading line(s).
fn section_body(render: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> io::Result<String> {
    let mut buf = Vec::new();
    render(&mut buf)?;
    let text = String::from_utf8(buf).map_err(io::Error::other)?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with(".SH "))
        .map(|l| format!("{l}\n"))
        .collect())
}

/// The manual page of `cmd`.
pub fn man_page(cmd: Command) -> io::Result<Vec<u8>> {
    let cmd = prepared(cmd);
    let name = cmd.get_name().to_string();
    let man = Man::new(cmd.clone())
        .title(name.to_uppercase())
        .section(SECTION)
        .date(page_date())
        .manual("knem-rs");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    let subs: Vec<&Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    if !subs.is_empty() {
        let globals: Vec<String> = cmd
            .get_arguments()
            .filter(|a| a.is_global_set())
            .map(|a| a.get_id().to_string())
            .collect();
        let mut roff = Roff::new();
        roff.control("SH", ["COMMANDS"]);
        if !globals.is_empty() {
            roff.text([roman(
                "Each command also takes the options above that are not -h or -V.",
            )]);
        }
        out.extend(roff.render().into_bytes());
        for sub in subs {
            // The global options are documented once, under OPTIONS.
            let mut sub = sub.clone();
            for g in &globals {
                sub = sub.mut_arg(g.as_str(), |a| a.hide(true));
            }
            let full = sub
                .get_bin_name()
                .map(str::to_string)
                .unwrap_or_else(|| format!("{name} {}", sub.get_name()));
            let mut roff = Roff::new();
            roff.control("SS", [full.as_str()]);
            out.extend(roff.render().into_bytes());
            let m = Man::new(sub);
            out.extend(section_body(|w| m.render_synopsis_section(w))?.into_bytes());
            out.extend(b".PP\n");
            out.extend(section_body(|w| m.render_description_section(w))?.into_bytes());
            out.extend(section_body(|w| m.render_options_section(w))?.into_bytes());
        }
    }
    if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        let mut roff = Roff::new();
        roff.control("SH", ["NOTES"]);
        out.extend(roff.render().into_bytes());
        out.extend(section_body(|w| man.render_extra_section(w))?.into_bytes());
    }
    man.render_version_section(&mut out)?;
    let others: Vec<String> = commands()
        .iter()
        .map(|c| c.get_name().to_string())
        .filter(|n| *n != name)
        .map(|n| format!("{n}({SECTION})"))
        .collect();
    let mut roff = Roff::new();
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(format!(
        "{}, and the README.md of knem-rs.",
        others.join(", ")
    ))]);
    out.extend(roff.render().into_bytes());
    Ok(breakable_lists(&String::from_utf8(out).map_err(io::Error::other)?).into_bytes())
}

/// Lists such as `[default: memcpy,shm,cma-read,...]` are one word to
/// troff, which warns that it cannot break a line longer than the page:
/// after each comma of a text line that a word follows, an optional break
/// point (`\:`, which prints nothing).
fn breakable_lists(roff: &str) -> String {
    let mut out = String::with_capacity(roff.len() + roff.len() / 16);
    for line in roff.lines() {
        if line.starts_with('.') || line.starts_with('\'') {
            out.push_str(line);
        } else {
            let mut chars = line.chars().peekable();
            while let Some(c) = chars.next() {
                out.push(c);
                if c == ',' && chars.peek().is_some_and(|n| !n.is_whitespace()) {
                    out.push_str("\\:");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// The shells completions are made for, with the file name each looks up
/// for `tool` (bash-completion: the name; zsh: `_` and the name; fish:
/// the name and `.fish`).
pub const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "bash"),
    (Shell::Zsh, "zsh"),
    (Shell::Fish, "fish"),
];

/// The file name of `tool`'s completion for `shell`.
pub fn completion_file(shell: Shell, tool: &str) -> String {
    match shell {
        Shell::Zsh => format!("_{tool}"),
        Shell::Fish => format!("{tool}.fish"),
        _ => tool.to_string(),
    }
}

/// The completion script of `cmd` for `shell`.
pub fn completion(shell: Shell, cmd: Command) -> Vec<u8> {
    let mut cmd = cmd;
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut out);
    out
}

fn write(path: PathBuf, bytes: &[u8], files: &mut Vec<PathBuf>) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::File::create(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    f.write_all(bytes)?;
    files.push(path);
    Ok(())
}

/// Write every man page and completion under `out` (layout in the crate
/// documentation); the files written, in order.
pub fn generate(out: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for cmd in commands() {
        let name = cmd.get_name().to_string();
        let page = man_page(cmd.clone())?;
        write(
            out.join(format!("man{SECTION}/{name}.{SECTION}")),
            &page,
            &mut files,
        )?;
        for (shell, dir) in SHELLS {
            let script = completion(shell, cmd.clone());
            write(
                out.join(dir).join(completion_file(shell, &name)),
                &script,
                &mut files,
            )?;
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        // 2026-11-28 00:00 UTC is 1795824000 s.
        assert_eq!(civil_from_days(1_795_824_000 / 86_400), (2026, 11, 28));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
