//! `zklock completions SHELL` and `zklock man [SUBCOMMAND]`: generated at
//! run time from the clap model, so every install has them, and the files
//! committed in `completions/` are made by the same functions (a test fails
//! when they drift from the code).

use anyhow::Result;
use clap::CommandFactory;
use clap::ValueHint;
use clap_complete::Shell;

use crate::cli::{Cli, ENVIRONMENT_HELP, HOLD_HELP, SUBCOMMANDS, reference};
use crate::exit::{self, Exit};
use crate::report::write_stdout;

pub fn completions(shell: Shell) -> Result<Exit> {
    write_stdout(&completion_script(shell))?;
    Ok(Exit::Command(0))
}

pub fn man(subcommand: Option<&str>) -> Result<Exit> {
    write_stdout(&man_page(subcommand))?;
    Ok(Exit::Command(0))
}

/// clap_complete's script for `shell` from the clap model, with two steps
/// of our own: values that are not file names are not completed as such
/// ([`completion_model`]), and bash completes the command after `--`
/// ([`BASH_AFTER_DOUBLE_DASH`]).
pub fn completion_script(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut completion_model(), "zklock", &mut out);
    if shell == Shell::Bash {
        let script = String::from_utf8_lossy(&out);
        out = (script.replacen(
            BASH_RUN_CASE,
            &format!("{BASH_RUN_CASE}{BASH_AFTER_DOUBLE_DASH}"),
            1,
        ))
        .into_bytes();
    }
    out
}

/// The model completions are made from: a value clap knows no kind of (a
/// host list, a duration, a user, a lock path...) completes nothing, where
/// clap_complete would offer file names; paths (`PathBuf`) and values
/// with a hint of their own (the command after `--`) are left as they are.
fn completion_model() -> clap::Command {
    let mut root = Cli::command();
    // The subcommands' arguments exist once built (`defer`, src/cli).
    root.build();
    let names: Vec<String> = (root.get_subcommands())
        .map(|sub| sub.get_name().to_owned())
        .collect();
    // Each subcommand in turn, so that their order stays.
    for name in names {
        root = root.mut_subcommand(name, |sub| {
            sub.mut_args(|arg| {
                let unknown = arg.get_value_hint() == ValueHint::Unknown;
                match arg.get_action().takes_values() && unknown {
                    true => arg.value_hint(ValueHint::Other),
                    false => arg,
                }
            })
        });
    }
    root
}

/// Where `run`'s completions begin in clap_complete's bash script.
const BASH_RUN_CASE: &str = "\n        zklock__subcmd__run)\n";

/// clap_complete's bash script offers `run`'s options after `--` too. There
/// the command and its arguments are typed: bash-completion's
/// `_command_offset` completes them as for the command itself; without
/// bash-completion, command names, then file names.
const BASH_AFTER_DOUBLE_DASH: &str = r#"            for (( i = 2; i < COMP_CWORD; i++ )); do
                if [[ "${COMP_WORDS[i]}" == "--" ]]; then
                    if declare -F _command_offset >/dev/null; then
                        _command_offset $(( i + 1 ))
                    elif (( COMP_CWORD == i + 1 )); then
                        COMPREPLY=( $(compgen -c -- "${cur}") )
                    else
                        COMPREPLY=( $(compgen -f -- "${cur}") )
                    fi
                    return 0
                fi
            done
"#;

/// zklock(1), or zklock-SUBCOMMAND(1): clap's sections of the `--help`
/// text, then the reference sections of [`crate::cli::reference`] and the
/// exit status and environment texts the `--help` shows after the options.
pub fn man_page(subcommand: Option<&str>) -> Vec<u8> {
    // clap's `help` subcommand has no page of its own: no `zklock-help(1)`.
    let root = Cli::command().disable_help_subcommand(true);
    let sub = subcommand
        .and_then(|name| root.find_subcommand(name))
        .cloned();
    let name = sub.as_ref().map(|sub| sub.get_name().to_owned());
    let mut page = match (sub, &name) {
        (Some(sub), Some(name)) => sub.name(format!("zklock-{name}")),
        _ => root.clone(),
    };
    page.build();
    let man = clap_mangen::Man::new(page.clone());
    let mut out = Vec::new();
    // Rendering into a Vec cannot fail.
    let _ = man.render_title(&mut out);
    let _ = man.render_name_section(&mut out);
    let _ = man.render_synopsis_section(&mut out);
    let _ = man.render_description_section(&mut out);
    if page.get_arguments().any(|arg| !arg.is_hide_set()) {
        let _ = man.render_options_section(&mut out);
    }
    if page.has_subcommands() {
        let _ = man.render_subcommands_section(&mut out);
    }
    for (title, body) in reference_sections(name.as_deref(), &root) {
        out.extend_from_slice(format!(".SH \"{title}\"\n{body}").as_bytes());
    }
    if page.get_version().is_some() {
        let _ = man.render_version_section(&mut out);
    }
    out
}

/// The sections after OPTIONS (or SUBCOMMANDS) of the page of `subcommand`,
/// as (title, roff body).
fn reference_sections(
    subcommand: Option<&str>,
    root: &clap::Command,
) -> Vec<(&'static str, String)> {
    // Below a help text's first line (its heading), as the page has its own.
    let body = |help: &str| {
        help.split_once('\n')
            .map_or(help, |(_, rest)| rest)
            .to_owned()
    };
    let mut sections = Vec::new();
    match subcommand {
        Some("run") => sections.push(("METRICS", preformatted(reference::METRICS))),
        Some("status") => sections.push(("JSON OUTPUT", preformatted(reference::STATUS_JSON))),
        Some("list") => sections.push(("JSON OUTPUT", preformatted(reference::LIST_JSON))),
        _ => {}
    }
    // The subcommands that connect: an exit status table, the environment
    // and the config file.
    let exit_rows = match subcommand {
        None | Some("run") => Some(exit::RUN),
        Some("hold") => Some(exit::HOLD),
        Some("status") => Some(exit::STATUS),
        Some("list") => Some(exit::LIST),
        Some("break") => Some(exit::BREAK),
        _ => None,
    };
    if let Some(rows) = exit_rows {
        sections.push(("EXIT STATUS", preformatted(&body(&exit::help(rows)))));
        let read = format!("{}\n{}", environment_read(root), reference::OTHER_VARIABLES);
        let mut environment = preformatted(&read);
        if matches!(subcommand, None | Some("run")) {
            environment.push_str(".SS \"Given to the command\"\n");
            environment.push_str(&preformatted(&body(ENVIRONMENT_HELP)));
        }
        if subcommand == Some("hold") {
            environment.push_str(".SS \"Printed for the shell\"\n");
            environment.push_str(&preformatted(&body(HOLD_HELP)));
        }
        sections.push(("ENVIRONMENT", environment));
        sections.push(("FILES", preformatted(reference::CONFIG_FILE)));
    }
    // `release` does not connect: its exit statuses only.
    if subcommand == Some("release") {
        let table = body(&exit::help(exit::RELEASE));
        sections.push(("EXIT STATUS", preformatted(&table)));
    }
    let see_also: Vec<String> = match subcommand {
        None => SUBCOMMANDS
            .iter()
            .map(|name| format!("zklock-{name}(1)"))
            .collect(),
        Some(_) => vec!["zklock(1)".to_owned()],
    };
    sections.push((
        "SEE ALSO",
        format!("{}\n", roff_escape(&see_also.join(", "))),
    ));
    sections
}

/// Every variable an option reads (each is the same as its flag), from the
/// clap model, so that a new one cannot be missed.
fn environment_read(root: &clap::Command) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut root = root.clone();
    root.build();
    for arg in root.get_subcommands().flat_map(|sub| sub.get_arguments()) {
        if let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) {
            let line = format!("  {:<25}the same as --{long}", env.to_string_lossy());
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    lines.join("\n")
}

/// `text` kept as it is laid out (no filling), in roff.
fn preformatted(text: &str) -> String {
    format!(".nf\n{}\n.fi\n", roff_escape(text))
}

/// Plain text as roff: backslashes, hyphens and quotes escaped, and no line
/// starting with a control character.
fn roff_escape(text: &str) -> String {
    text.lines()
        .map(|line| {
            let escaped = line
                .replace('\\', "\\e")
                .replace('-', "\\-")
                .replace('\'', "\\(aq");
            if escaped.starts_with('.') {
                format!("\\&{escaped}")
            } else {
                escaped
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod generated_files;
