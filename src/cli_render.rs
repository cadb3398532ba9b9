//! Shell completions and the man page, rendered from the clap definitions of
//! [`crate::cli`]. Shared by `harnessd completions` / `harnessd man` and by build.rs,
//! which renders the Debian package's copies: one function each, so the packaged
//! files are what the binary prints. Renders into memory and touches nothing else.

use clap::CommandFactory as _;
use clap_mangen::roff::{Roff, bold, roman};

/// The name the scripts complete and the page documents.
pub const BIN: &str = "harnessd";

/// The completion script for `shell`. Into memory: clap_complete panics when its
/// writer fails, and a closed stdout (`| head`) is not worth a panic.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut crate::cli::Cli::command(), BIN, &mut out);
    out
}

/// The man page, section 1, in roff: one page for the whole program, its global
/// options, then a COMMANDS section with every subcommand (nested ones by their
/// full name), its arguments and their help. clap_mangen's own subcommand list
/// points at a page per subcommand (`harnessd-run(1)`), which is not installed.
pub fn man_page() -> Vec<u8> {
    let cmd = crate::cli::Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = man.render_title(&mut page);
    let mut sections = Vec::new();
    let _ = man.render_name_section(&mut sections);
    let _ = man.render_synopsis_section(&mut sections);
    let _ = man.render_description_section(&mut sections);
    let _ = man.render_options_section(&mut sections);
    let mut commands = Roff::new();
    commands.control("SH", ["COMMANDS"]);
    for sub in cmd.get_subcommands() {
        command_entry(&mut commands, BIN, sub);
    }
    let _ = commands.to_writer(&mut sections);
    let _ = man.render_version_section(&mut sections);
    // Each renderer starts with the same two-line apostrophe preamble; the title
    // already carries it.
    let text = String::from_utf8_lossy(&sections);
    for line in text.lines().filter(|l| !is_preamble(l)) {
        page.extend_from_slice(ascii(line).as_bytes());
        page.push(b'\n');
    }
    page
}

/// The line with every character past ASCII as a groff escape (`…` is `\[u2026]`):
/// a page read from a pipe (`man -l -`) is taken as Latin-1, and the help texts
/// have dashes, ellipses and arrows.
fn ascii(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    out
}

fn is_preamble(line: &str) -> bool {
    line.starts_with(".ie \\n(.g .ds Aq") || line.starts_with(".el .ds Aq")
}

/// One subcommand: its full name and arguments as a subheading, its help, then
/// each argument; nested subcommands after it.
fn command_entry(roff: &mut Roff, parent: &str, cmd: &clap::Command) {
    let name = format!("{parent} {}", cmd.get_name());
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_global_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    let synopsis: Vec<String> = args.iter().map(|a| synopsis_of(a)).collect();
    let heading = format!("{name} {}", synopsis.join(" "));
    roff.control("SS", [heading.trim_end()]);
    let about = cmd.get_long_about().or(cmd.get_about());
    if let Some(about) = about {
        roff.text([roman(about.to_string())]);
    }
    for arg in &args {
        roff.control("TP", []);
        roff.text([bold(synopsis_of(arg))]);
        let help = arg.get_long_help().or(arg.get_help());
        if let Some(help) = help {
            roff.text([roman(help.to_string())]);
        }
    }
    for sub in cmd.get_subcommands() {
        command_entry(roff, &name, sub);
    }
}

/// How an argument is written: `[--flag]`, `[--flag VALUE]`, `NAME`, `[NAME]`,
/// `NAME...`, `-- NAME...`; a short form as `-f, --file FILE`.
fn synopsis_of(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map_or_else(|| arg.get_id().as_str().to_uppercase(), ToString::to_string);
    let dots = if matches!(arg.get_action(), clap::ArgAction::Append) {
        "..."
    } else {
        ""
    };
    let written = match (arg.get_short(), arg.get_long()) {
        (short, Some(long)) => {
            let short = short.map(|s| format!("-{s}, ")).unwrap_or_default();
            if arg.get_action().takes_values() {
                format!("{short}--{long} {value}")
            } else {
                format!("{short}--{long}")
            }
        }
        _ if arg.is_last_set() => format!("-- {value}{dots}"),
        _ => format!("{value}{dots}"),
    };
    if arg.is_required_set() {
        written
    } else {
        format!("[{written}]")
    }
}
