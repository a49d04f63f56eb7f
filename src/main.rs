//! zklock: run a command while holding a distributed lock in ZooKeeper.

// main parses the command line (cli) and calls one subcommand. Below it,
// layers, each importing only from the ones below it (nothing imports back
// up, and no two modules import each other):
//   hold                     `zklock hold` and `zklock release`, built on
//                            run's steps (run never imports hold)
//   run, status, list,       one module per subcommand (`break_lock` is
//   break_lock, generate     `zklock break`; `generate` prints completions
//                            and man pages)
//   cli, present             the command-line model the subcommands take
//                            their arguments from; everything zklock tells
//                            people of a lock (holders, run records, the
//                            JSON of `status` and `list`)
//   lock, command            the lock recipe (a lock is taken in
//                            lock::acquire, which reports queue events to
//                            its caller); the command's processes and
//                            their environment
//   session                  connection settings and the ZooKeeper session
//   exit, report, values,    exit codes, messages, parsed values and times
//   origin, zk               (the one duration format); this host, user and
//                            CI job; ZooKeeper's protocol and one session (no
//                            locks): the package's library (src/lib.rs), used
//                            as `zklock::zk` here and by tests/ and bench/;
//                            scratch, the unit tests' own directories
// The test in src/layers.rs holds this order (written there once more) and
// fails on an import that points up or on a circle between modules:
// `cargo test --bin zklock layers` (ARCHITECTURE.md, "Code map").
mod break_lock;
mod cli;
mod command;
mod exit;
mod generate;
mod hold;
mod layers;
mod list;
mod lock;
mod origin;
mod present;
mod report;
mod run;
#[cfg(test)]
mod scratch;
mod session;
mod status;
mod values;

use std::process::ExitCode;

use clap::error::ErrorKind as ClapErrorKind;
use clap::{CommandFactory, Parser};

use crate::cli::{Command, Format};
use crate::command::keeper::Keeper;
use crate::exit::Exit;

fn main() -> ExitCode {
    if command::keeper::is_hidden_mode() {
        command::keeper::run_hidden_mode();
    }
    // Before anything else: a fork costs least while zklock is small.
    let keeper = Keeper::early();
    let (outcome, for_eval) = if hold::holder::is_hidden_mode() {
        (hold::holder::main(), false)
    } else {
        let cli = match cli::Cli::try_parse() {
            Ok(cli) => cli,
            Err(err) => {
                let code = usage_error(err);
                if code != ExitCode::SUCCESS && hold::for_eval_in_args() {
                    hold::stop_the_script(Exit::Usage);
                }
                return code;
            }
        };
        let for_eval = matches!(&cli.command, Command::Hold(args) if args.format == Format::Sh);
        (dispatch(cli.command, keeper), for_eval)
    };
    let exit = match outcome {
        Ok(exit) => exit,
        Err(err) => {
            report::say(format_args!("{err:#}"));
            Exit::for_error(&err)
        }
    };
    if for_eval && exit.code() != 0 {
        hold::stop_the_script(exit);
    }
    exit.into()
}

/// Runs `command`; `keeper` is `run`'s, if started early (Keeper::early).
fn dispatch(command: Command, keeper: Option<Keeper>) -> anyhow::Result<Exit> {
    match command {
        Command::Run(args) => run::run(args, keeper),
        Command::Hold(args) => hold::hold(args),
        Command::Release(args) => hold::release(args),
        Command::Status(args) => status::status(args),
        Command::List(args) => list::list(args),
        Command::Break(args) => break_lock::break_lock(args),
        Command::Completions { shell } => generate::completions(shell),
        Command::Man { subcommand } => generate::man(subcommand.as_deref()),
    }
}

/// `--help` and `--version` print as clap renders them and succeed; any
/// other command-line problem is one line on stderr and exit 64.
fn usage_error(err: clap::Error) -> ExitCode {
    match err.kind() {
        ClapErrorKind::DisplayHelp | ClapErrorKind::DisplayVersion => {
            let _ = err.print();
            ExitCode::SUCCESS
        }
        ClapErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            Exit::Usage.into()
        }
        _ => {
            report::say(format_args!("{}", one_line(&err.render().to_string())));
            Exit::Usage.into()
        }
    }
}

/// clap's first paragraph (the error itself, without usage and tips),
/// folded onto one line.
fn one_line(rendered: &str) -> String {
    let first = rendered.split("\n\n").next().unwrap_or(rendered);
    let text = first.strip_prefix("error: ").unwrap_or(first);
    let words: Vec<&str> = text.split_whitespace().collect();
    // clap quotes the offending value as given, control characters included.
    format!(
        "{}; see '{}--help'",
        present::escape_controls(&words.join(" ")),
        subcommand_given()
    )
}

/// `zklock SUBCOMMAND ` as given on the command line, or `zklock `: where
/// the help for a usage error is.
fn subcommand_given() -> String {
    let names: Vec<String> = cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    // args_os: an argument that is not UTF-8 must not panic here, where
    // its usage error is being reported.
    std::env::args_os()
        .skip(1)
        .filter_map(|arg| arg.into_string().ok())
        .find(|arg| names.contains(arg))
        .map_or_else(|| "zklock ".to_owned(), |name| format!("zklock {name} "))
}
